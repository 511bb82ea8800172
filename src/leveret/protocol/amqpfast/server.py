"""The server role of an AMQP/Fast 0.8a2 connection, sans-IO (AMQ RFC 006); front ends import it.

Theory of operation (h11's contract). The front end feeds octets with
:meth:`FastServer.receive_data` and pulls :mod:`~leveret.protocol.amqpfast.events` with
:meth:`FastServer.next_event` until it returns :data:`NEED_DATA` or :data:`PAUSED`, sending
whatever :meth:`FastServer.data_to_send` returns. PAUSED means a decision is owed: after
:class:`~.events.LoginRequested` call :meth:`~FastServer.accept_login` or
:meth:`~FastServer.refuse_login`, after :class:`~.events.OpenRequested`
:meth:`~FastServer.accept_open` or :meth:`~FastServer.refuse_open`; input stays buffered
meanwhile, so commands a client pipelines behind CONNECTION OPEN wait for the answer.

Confirmations (3.2.11): a command with a non-zero confirm-tag is answered (CONNECTION, CHANNEL
or HANDLE REPLY) once the front end has handled its event, i.e. at its next call of
``next_event`` or ``data_to_send``, so whatever the front end sends while handling it goes
first, as the RFC requires; if the front end closed the handle, channel or connection
instead, the close replaces the reply.

Connection states (3.2), and the commands each accepts (:data:`ACCEPTED`; anything else from
the client closes the connection with 503, and a command only a server sends too)::

    AWAIT_INITIATION --128 v--> CHALLENGED --RESPONSE--> AUTHENTICATING (PAUSED)
        --accept_login--> TUNING --TUNE*, OPEN--> OPENING (PAUSED) --accept_open--> OPEN
    any state --client CLOSE--> CLOSED (answered with CLOSE 200)
    OPEN --client CLOSE--> CLOSE_RECEIVED --answer_close--> CLOSED  (broker_answers_closing)
    any state --error / close()--> CLOSING --client CLOSE--> CLOSED

Errors follow 2.2.10: a fault on a destination closes the handle (HANDLE CLOSE), on a
channel the channel, anything else (bad framing 501, bad syntax 502, commands out of place
503, unknown channel or handle 504) the connection. In CLOSING every command but CONNECTION
CLOSE is discarded and answered with another CONNECTION CLOSE, as 3.2.9 says; a closing
channel or handle discards its commands until the client's CLOSE.

Messages (3.4): fragments are reassembled per channel (a channel carries one message at a
time); the first holds the header block. Restartable mode is the RFC's minimum
implementation: HANDLE PREPARE is answered at once with HANDLE READY giving the body octets
the PREPARE itself carried, the rest follows in HANDLE SENDs, a partial message is dropped
with its channel, and a non-empty content-hash (lowercase hex SHA1 of the body) is checked
(542 on mismatch). Peer services, streaming and out-of-band transfer are refused with 540.
The readings taken where the RFC is silent are in docs/compatibility.md ("AMQP/Fast 0.8a2").
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from leveret.errors import AMQPError
from leveret.protocol.amqpfast import commands as c
from leveret.protocol.amqpfast import events as ev
from leveret.protocol.amqpfast.framing import (
    PRE_TUNE_FRAME_MAX,
    PROTOCOL_ID,
    PROTOCOL_VERSION,
    CommandDecoder,
    Fragment,
    encode_command,
    split_message,
)

if TYPE_CHECKING:
    from leveret.protocol.amqpfast.fieldtable import FastTable

__all__ = ["ACCEPTED", "NEED_DATA", "PAUSED", "FastServer", "OwedReply", "State"]


class _Sentinel(enum.Enum):
    NEED_DATA = "NEED_DATA"
    PAUSED = "PAUSED"


NEED_DATA: Final = _Sentinel.NEED_DATA
"""``next_event`` has nothing more until more octets arrive."""
PAUSED: Final = _Sentinel.PAUSED
"""``next_event`` waits for the front end's answer to the last event."""

OK = 200
NOT_FOUND_MESSAGE = 310  # "message not found" for HANDLE BROWSE (3.5.9)
CONTENT_TOO_LARGE = 311
CONNECTION_FORCED = 320
ACCESS_REFUSED = 403
NOT_FOUND = 404
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INVALID_CONTENTS = 542  # "invalid message contents" (3.3.2.2)

MIN_FRAME_MAX = 1024


class State(enum.Enum):
    AWAIT_INITIATION = "await-initiation"
    CHALLENGED = "challenged"
    AUTHENTICATING = "authenticating"
    TUNING = "tuning"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSE_RECEIVED = "close-received"  # the client's CLOSE is in, ``answer_close`` is awaited
    CLOSED = "closed"


_CHANNEL_COMMANDS = frozenset(
    cls.TYPE
    for cls in (c.ChannelOpen, c.ChannelAck, c.ChannelCommit, c.ChannelRollback, c.ChannelClose)
)
_HANDLE_COMMANDS = frozenset(
    cls.TYPE
    for cls in (
        c.HandleOpen,
        c.HandleSend,
        c.HandleConsume,
        c.HandleCancel,
        c.HandleFlow,
        c.HandleUnget,
        c.HandleQuery,
        c.HandleBrowse,
        c.HandlePrepare,
        c.HandleClose,
    )
)
_ALWAYS = frozenset({c.ConnectionPing.TYPE, c.ConnectionClose.TYPE})

OwedReply = tuple[str, int, c.Command]
"""A confirmation owed for a command: its level (channel, handle), the channel's or
handle's id, and the reply."""

ACCEPTED: dict[State, frozenset[int]] = {
    State.CHALLENGED: _ALWAYS | {c.ConnectionResponse.TYPE},
    State.TUNING: _ALWAYS | {c.ConnectionTune.TYPE, c.ConnectionOpen.TYPE},
    State.OPEN: _ALWAYS | _CHANNEL_COMMANDS | _HANDLE_COMMANDS,
    State.CLOSING: frozenset({c.ConnectionClose.TYPE}),
}
"""The client commands each state processes (from the RFC's "server must expect" lists)."""


class _Fail(Exception):
    """Internal: close ``level`` (connection/channel/handle) with a reply code."""

    def __init__(self, level: str, code: int, text: str, ident: int = 0) -> None:
        super().__init__(text)
        self.level = level
        self.code = code
        self.text = text
        self.ident = ident


def _conn(code: int, text: str) -> _Fail:
    return _Fail("connection", code, text)


@dataclass(slots=True)
class _Assembly:
    """A message being received on a channel."""

    handle_id: int
    header: c.MessageHeader | None = None
    head: bytearray = field(default_factory=bytearray)  # octets until the header is whole
    body: bytearray = field(default_factory=bytearray)
    content_hash: str = ""


@dataclass(slots=True)
class _Channel:
    transacted: bool
    restartable: bool
    handles: set[int] = field(default_factory=set)
    closing: bool = False
    next_nbr: int = 1
    outstanding: dict[int, int] = field(default_factory=dict)  # message-nbr → handle
    assembly: _Assembly | None = None


@dataclass(slots=True)
class _Handle:
    channel_id: int
    service: ev.ServiceType
    dest_name: str
    producer: bool
    consumer: bool
    browser: bool
    temporary: bool
    closing: bool = False
    consuming: bool = False
    prefetch: int = 0
    unreliable: bool = False
    paused: bool = False


@dataclass(slots=True)
class _Owed:
    """A fragment announced by a SEND or PREPARE, and what to do with it."""

    handle_id: int
    command: c.HandleSend | c.HandlePrepare


class FastServer:
    """One AMQP/Fast connection, server side.

    Args:
        mechanisms: offered in CONNECTION CHALLENGE (``PLAIN`` and/or ``NONE``).
        frame_max: FRAME_MAX offered (at least 1024); commands and fragments the client sends
            are held to it once the server's CONNECTION TUNE is out.
        channel_max, handle_max, txn_limit: offered limits (0: none).
        heartbeat: HEARTBEAT asked of the client, seconds (0: none).
        temporary_prefix: nameless temporary destinations are named ``<prefix>.<n>``; the
            front end makes it unique in the virtual host (e.g. with a connection number).
        now: the monotonic time the connection was accepted.
    """

    def __init__(
        self,
        *,
        mechanisms: tuple[str, ...] = ("PLAIN",),
        frame_max: int = 131072,
        channel_max: int = 0,
        handle_max: int = 0,
        heartbeat: int = 0,
        txn_limit: int = 0,
        temporary_prefix: str = "amq.fast",
        now: float = 0.0,
        broker_answers_closing: bool = False,
    ) -> None:
        if frame_max < MIN_FRAME_MAX:
            raise ValueError(f"frame_max {frame_max} is below the RFC's minimum {MIN_FRAME_MAX}")
        self.state = State.AWAIT_INITIATION
        self.mechanisms = mechanisms
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.handle_max = handle_max
        self.heartbeat = heartbeat
        self.txn_limit = txn_limit
        self.temporary_prefix = temporary_prefix
        # The client's HANDLE CLOSE and CHANNEL CLOSE are answered by the broker
        # (``answer_handle_close``, ``answer_channel_close``), not at once: it may answer once
        # what they held is let go elsewhere (a consumer of a queue another node leads); it
        # holds the input until then, so that the id is not opened again before the answer.
        # So is its CONNECTION CLOSE of an open connection (``answer_close``): its channels
        # close first, and nothing it sends after is read.
        self.broker_answers_closing = broker_answers_closing
        self._unanswered: set[tuple[str, int]] = set()
        self.version = 0
        """The agreed protocol version (after the initiation)."""
        self.client_frame_max = frame_max
        """Largest command or fragment the client accepts (its CONNECTION TUNE)."""
        self.client_heartbeat = 0
        self.dictionary: dict[str, str] = {}
        """The client's header-name aliases (CONNECTION TUNE dictionaries, merged)."""
        self.channels: dict[int, _Channel] = {}
        self.handles: dict[int, _Handle] = {}
        self._decoder = CommandDecoder(PRE_TUNE_FRAME_MAX)
        self._initiation = bytearray()
        self._out: list[bytes] = []
        self._owed: _Owed | None = None
        self._reply: OwedReply | None = None
        self._open_tag = 0
        self._temporaries = 0
        self._client_pinged = False
        self._last_received = now
        self._last_sent = now
        self._now = now

    # -- I/O ------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> None:
        """Buffer ``data`` received at ``now``."""
        self._now = self._last_received = now
        if self.state in (State.CLOSED, State.CLOSE_RECEIVED):
            return
        if self.state is State.AWAIT_INITIATION:
            self._initiation += data
        else:
            self._decoder.receive(data)

    def data_to_send(self) -> bytes:
        """Everything encoded so far (the confirmation owed for the last event included)."""
        self._flush_reply()
        out = b"".join(self._out)
        self._out.clear()
        if out:
            self._last_sent = self._now
        return out

    def next_event(self) -> ev.Event | _Sentinel:
        """The next event, or NEED_DATA / PAUSED."""
        self._flush_reply()
        while True:
            if self.state in (State.AUTHENTICATING, State.OPENING):
                return PAUSED
            if self.state in (State.CLOSED, State.CLOSE_RECEIVED):
                return NEED_DATA
            if self.state is State.AWAIT_INITIATION:
                started = self._initiate()
                if started is not None:
                    return started
                continue
            try:
                item = self._decoder.next()
            except AMQPError as exc:
                return self._fail_connection(exc.reply_code, exc.reply_text)
            if item is None:
                return NEED_DATA
            try:
                event = self._dispatch(item)
            except _Fail as fail:
                event = self._apply(fail)
            if event is not None:
                return event

    # -- the front end's answers ----------------------------------------------------------

    def accept_login(self) -> None:
        """The credentials of the last LoginRequested are good: send CONNECTION TUNE."""
        self._expect(State.AUTHENTICATING)
        options: FastTable = {"FRAME_MAX": self.frame_max, "HEARTBEAT": self.heartbeat}
        for name, value in (
            ("CHANNEL_MAX", self.channel_max),
            ("HANDLE_MAX", self.handle_max),
            ("TXN_LIMIT", self.txn_limit),
        ):
            if value:
                options[name] = value
        self._send(c.ConnectionTune(options=options))
        # From here the client knows our FRAME_MAX, and may use it.
        self._decoder.frame_max = self.frame_max
        self.state = State.TUNING

    def refuse_login(self, text: str = "login refused") -> None:
        """The credentials are bad: CONNECTION CLOSE 403."""
        self._expect(State.AUTHENTICATING)
        self._close_connection(ACCESS_REFUSED, text)

    def accept_open(self) -> None:
        """The virtual host is open to this client: CONNECTION REPLY if one was asked for."""
        self._expect(State.OPENING)
        self.state = State.OPEN
        if self._open_tag:
            self._send(c.ConnectionReply(self._open_tag, OK, "OK"))

    def refuse_open(self, code: int, text: str) -> None:
        """The virtual host is not open to this client (e.g. 402 invalid path)."""
        self._expect(State.OPENING)
        self._close_connection(code, text)

    def notify(
        self,
        handle_id: int,
        header: c.MessageHeader,
        body: bytes,
        *,
        dest_name: str = "",
        redelivered: bool = False,
        delivered: bool = True,
    ) -> int:
        """Send a message on a consuming (or, ``delivered=False``, browsing) handle.

        The header block and body go out in fragments of at most the client's FRAME_MAX,
        each after a HANDLE NOTIFY; ``dest_name`` rides on the last one only. Returns the
        message-nbr (sequential per channel, from 1), which CHANNEL ACK and HANDLE UNGET
        refer to; a delivered message on a reliable handle counts against its prefetch until
        then.
        """
        handle = self._usable_handle(handle_id)
        if delivered and not handle.consuming:
            raise RuntimeError(f"handle {handle_id} is not consuming")
        if not delivered and not handle.browser:
            raise RuntimeError(f"handle {handle_id} was not opened for browsing")
        if header.body_size != len(body):
            raise ValueError(f"header says {header.body_size} octets, body has {len(body)}")
        channel = self.channels[handle.channel_id]
        nbr = channel.next_nbr
        channel.next_nbr = nbr % 0xFFFFFFFF + 1  # 2**32 - 1 is the highest (3.5.12)
        if delivered and not handle.unreliable:
            channel.outstanding[nbr] = handle_id
        pieces = split_message(header, body, self.client_frame_max)
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            self._send(
                c.HandleNotify(
                    handle_id=handle_id,
                    message_nbr=nbr,
                    fragment_size=len(piece),
                    partial=not last,
                    delivered=delivered,
                    redelivered=redelivered,
                    dest_name=dest_name if last else "",
                )
            )
            self._out.append(piece)
        return nbr

    def credit(self, handle_id: int) -> int | None:
        """Messages the handle may still be sent (prefetch minus unacknowledged); ``None``
        when it does not limit (unreliable consumer), 0 when paused or not consuming."""
        handle = self.handles.get(handle_id)
        if handle is None or not handle.consuming or handle.paused or handle.closing:
            return 0
        if handle.unreliable:
            return None
        held = sum(
            1 for h in self.channels[handle.channel_id].outstanding.values() if h == handle_id
        )
        return max(handle.prefetch - held, 0)

    def index(self, handle_id: int, message_nbr: int, message_list: bytes) -> None:
        """Answer a QueryRequested: the message-nbrs available, e.g. ``b"0 5 9 15-40 80"``."""
        self._usable_handle(handle_id)
        self._send(c.HandleIndex(handle_id, message_nbr, message_list))

    def browse_missing(self, handle_id: int, confirm_tag: int) -> None:
        """Answer a BrowseRequested whose message is gone: HANDLE REPLY 310."""
        self._usable_handle(handle_id)
        self._send(c.HandleReply(handle_id, confirm_tag, NOT_FOUND_MESSAGE, "message not found"))

    def hold_reply(self) -> OwedReply | None:
        """Take back the confirmation owed for the event being handled (a HANDLE REPLY,
        say), which would otherwise go out with the next output: the front end hands it to
        ``send_reply`` once the event's work is done, later (a declaration waiting for a
        cluster's metadata store). None when none is owed."""
        reply, self._reply = self._reply, None
        return reply

    def send_reply(self, reply: OwedReply) -> None:
        """Send a confirmation ``hold_reply`` took, unless its handle or channel was closed
        meanwhile (its close answered the command instead)."""
        level, ident, command = reply
        if self.state is not State.OPEN:
            return
        where = self.handles.get(ident) if level == "handle" else self.channels.get(ident)
        if where is None or where.closing:
            return
        self._send(command)

    def close_handle(self, handle_id: int, code: int, text: str) -> None:
        """Close a handle from the server side (e.g. 404: no such destination)."""
        self._usable_handle(handle_id)
        self._apply(_Fail("handle", code, text, handle_id))

    def close_channel(self, channel_id: int, code: int, text: str) -> None:
        """Close a channel from the server side."""
        channel = self.channels.get(channel_id)
        if channel is None or channel.closing:
            raise RuntimeError(f"channel {channel_id} is not open")
        self._apply(_Fail("channel", code, text, channel_id))

    def close(self, code: int = CONNECTION_FORCED, text: str = "broker shutdown") -> None:
        """Close the connection from the server side (CONNECTION CLOSE, then wait for one);
        with the client's CLOSE unanswered, answer it instead."""
        if self.state is State.CLOSE_RECEIVED:
            self.answer_close()
        elif self.state not in (State.CLOSING, State.CLOSED, State.AWAIT_INITIATION):
            self._close_connection(code, text)

    def next_tick(self) -> float | None:
        """When :meth:`tick` next has something to do (None: nothing in this state)."""
        if self.state not in (State.OPEN, State.TUNING):
            return None
        due: float | None = None
        if self.client_heartbeat:
            due = self._last_sent + self.client_heartbeat
        if self._client_pinged and self.heartbeat:
            # tick takes the client for dead past two intervals (">"): just past that.
            silent = self._last_received + 2 * self.heartbeat + 1e-3
            due = silent if due is None else min(due, silent)
        return due

    def tick(self, now: float) -> ev.ConnectionClosed | None:
        """Heartbeats (2.2.12): PING the client every HEARTBEAT it asked for; a client that
        pinged once and then stayed silent for two of our intervals is taken for dead."""
        self._now = now
        if self.state in (State.OPEN, State.TUNING):
            interval = self.client_heartbeat
            if interval and now - self._last_sent >= interval:
                self._send(c.ConnectionPing(respond=False))
            if (
                self._client_pinged
                and self.heartbeat
                and now - self._last_received > 2 * self.heartbeat
            ):
                self.state = State.CLOSED
                return ev.ConnectionClosed(CONNECTION_FORCED, "missed heartbeats", by_client=False)
        return None

    # -- internals ------------------------------------------------------------------------

    def answer_handle_close(self, handle_id: int) -> None:
        """With ``broker_answers_closing``: answer the client's HANDLE CLOSE of
        ``handle_id`` (its ``HandleClosed``); nothing when none waits, or once closed."""
        if ("handle", handle_id) in self._unanswered:
            self._unanswered.discard(("handle", handle_id))
            if self.state is State.OPEN:
                self._send(c.HandleClose(handle_id, OK, "OK"))

    def answer_close(self) -> None:
        """With ``broker_answers_closing``: answer the client's CONNECTION CLOSE (its
        ``ConnectionClosed``) with CLOSE 200; nothing once answered."""
        if self.state is State.CLOSE_RECEIVED:
            self._send(c.ConnectionClose(OK, "OK"))
            self.state = State.CLOSED

    def answer_channel_close(self, channel_id: int) -> None:
        """As ``answer_handle_close``, for the client's CHANNEL CLOSE (``ChannelClosed``)."""
        if ("channel", channel_id) in self._unanswered:
            self._unanswered.discard(("channel", channel_id))
            if self.state is State.OPEN:
                self._send(c.ChannelClose(channel_id, OK, "OK"))

    def _expect(self, state: State) -> None:
        if self.state is not state:
            raise RuntimeError(f"not {state.value} but {self.state.value}")

    def _send(self, command: c.Command) -> None:
        self._out.append(encode_command(command))

    def _flush_reply(self) -> None:
        if self._reply is not None:
            self._send(self._reply[2])
            self._reply = None

    def _owe_reply(self, level: str, ident: int, reply: c.Command) -> None:
        self._flush_reply()
        self._reply = (level, ident, reply)

    def _usable_handle(self, handle_id: int) -> _Handle:
        handle = self.handles.get(handle_id)
        if handle is None or handle.closing or self.state is not State.OPEN:
            raise RuntimeError(f"handle {handle_id} is not open")
        return handle

    def _initiate(self) -> ev.Event | _Sentinel | None:
        """Read the initiation: NEED_DATA, the ConnectionClosed of a bad one, or None."""
        if len(self._initiation) < 2:
            return NEED_DATA
        protocol_id, version = self._initiation[0], self._initiation[1]
        rest = bytes(self._initiation[2:])
        self._initiation.clear()
        if protocol_id != PROTOCOL_ID or version < 1:
            # 3.2.2: an invalid initiation is answered by closing the network connection.
            self.state = State.CLOSED
            return ev.ConnectionClosed(
                FRAME_ERROR, f"invalid initiation {protocol_id} {version}", by_client=False
            )
        self.version = min(version, PROTOCOL_VERSION)
        self._send(c.ConnectionChallenge(self.version, " ".join(self.mechanisms), {}))
        self.state = State.CHALLENGED
        self._decoder.receive(rest)
        return None

    def _close_connection(self, code: int, text: str) -> None:
        self._reply = None
        self._send(c.ConnectionClose(code, text))
        self.state = State.CLOSING
        self._owed = None

    def _fail_connection(self, code: int, text: str) -> ev.Event | _Sentinel:
        """A framing or syntax error: the decoder is unusable, so nothing more is read."""
        if self.state is State.CLOSING:
            self.state = State.CLOSED
            return ev.ConnectionClosed(code, text, by_client=False)
        self._close_connection(code, text)
        # The stream can no longer be parsed: wait for nothing but the socket to close.
        self.state = State.CLOSED
        return ev.ConnectionClosed(code, text, by_client=False)

    def _apply(self, fail: _Fail) -> ev.Event | None:
        """Carry out a close decided by a check (or by the front end)."""
        if fail.level == "handle":
            handle = self.handles[fail.ident]
            if self._reply and self._reply[0] == "handle" and self._reply[1] == fail.ident:
                self._reply = None
            channel = self.channels[handle.channel_id]
            if channel.assembly is not None and channel.assembly.handle_id == fail.ident:
                channel.assembly = None
            if self._owed is not None and self._owed.handle_id == fail.ident:
                self._owed = None
            handle.closing = True
            handle.consuming = False
            self._send(c.HandleClose(fail.ident, fail.code, fail.text))
            return None
        if fail.level == "channel":
            channel = self.channels[fail.ident]
            if self._reply and self._reply[0] in ("channel", "handle"):
                self._reply = None
            channel.closing = True
            channel.assembly = None
            self._send(c.ChannelClose(fail.ident, fail.code, fail.text))
            return None
        self._close_connection(fail.code, fail.text)
        return None

    def _dispatch(self, item: c.Command | Fragment) -> ev.Event | None:
        if isinstance(item, Fragment):
            return self._fragment(item)
        self._owed = None
        state = self.state
        if item.TYPE not in ACCEPTED[state]:
            if state is State.CLOSING:
                # 3.2.9: discard, and answer with another CONNECTION CLOSE.
                self._send(c.ConnectionClose(COMMAND_INVALID, "connection is closing"))
                return None
            if not item.FROM_CLIENT:
                raise _conn(COMMAND_INVALID, f"{item.NAME} is sent by servers only")
            raise _conn(COMMAND_INVALID, f"{item.NAME} not allowed now ({state.value})")
        if isinstance(item, c.ConnectionClose):
            if state is State.CLOSING:
                self.state = State.CLOSED
                return ev.ConnectionClosed(item.reply_code, item.reply_text, by_client=False)
            self._reply = None
            if self.broker_answers_closing and state is State.OPEN:
                self.state = State.CLOSE_RECEIVED
            else:
                self._send(c.ConnectionClose(OK, "OK"))
                self.state = State.CLOSED
            return ev.ConnectionClosed(item.reply_code, item.reply_text, by_client=True)
        if isinstance(item, c.ConnectionPing):
            self._client_pinged = True
            if item.respond:
                self._send(c.ConnectionPing(respond=False))
            return None
        if isinstance(item, c.ConnectionResponse):
            return self._response(item)
        if isinstance(item, c.ConnectionTune):
            self._tune(item)
            return None
        if isinstance(item, c.ConnectionOpen):
            self._open_tag = item.confirm_tag
            self.state = State.OPENING
            return ev.OpenRequested(item.virtual_path, item.client_name, item.options)
        if item.TYPE in _CHANNEL_COMMANDS:
            return self._channel_command(item)
        return self._handle_command(item)

    # -- connection -----------------------------------------------------------------------

    def _response(self, item: c.ConnectionResponse) -> ev.Event:
        if item.mechanism not in self.mechanisms:
            raise _conn(ACCESS_REFUSED, f"mechanism {item.mechanism!r} not offered")
        login = password = ""
        if item.mechanism == "PLAIN":
            values = item.responses.get("LOGIN"), item.responses.get("PASSWORD")
            if not isinstance(values[0], str) or not isinstance(values[1], str):
                raise _conn(SYNTAX_ERROR, "PLAIN needs LOGIN and PASSWORD strings")
            login, password = values[0], values[1]
        self.state = State.AUTHENTICATING
        return ev.LoginRequested(item.mechanism, login, password)

    def _tune(self, item: c.ConnectionTune) -> None:
        frame_max = item.options.get("FRAME_MAX", self.client_frame_max)
        heartbeat = item.options.get("HEARTBEAT", self.client_heartbeat)
        if not isinstance(frame_max, int) or not MIN_FRAME_MAX <= frame_max <= self.frame_max:
            raise _conn(NOT_ALLOWED, f"FRAME_MAX {frame_max!r} outside 1024..{self.frame_max}")
        if not isinstance(heartbeat, int) or heartbeat < 0:
            raise _conn(NOT_ALLOWED, f"HEARTBEAT {heartbeat!r} is not a number of seconds")
        aliases = {}
        for alias, full in item.dictionary.items():
            if not isinstance(full, str):
                raise _conn(SYNTAX_ERROR, f"dictionary entry {alias!r} is not a string")
            aliases[alias] = full
        self.client_frame_max = frame_max
        self.client_heartbeat = heartbeat
        self.dictionary.update(aliases)

    # -- channels -------------------------------------------------------------------------

    def _channel_command(self, item: c.Command) -> ev.Event | None:
        channel_id: int = getattr(item, "channel_id")  # noqa: B009 - every channel command has one
        channel = self.channels.get(channel_id)
        if isinstance(item, c.ChannelOpen):
            return self._channel_open(item, channel)
        if channel is None:
            raise _conn(CHANNEL_ERROR, f"{item.NAME} on channel {channel_id}, which is not open")
        if isinstance(item, c.ChannelClose):
            del self.channels[channel_id]
            for handle_id in channel.handles:
                self.handles.pop(handle_id, None)
            if self._owed is not None and self._owed.handle_id in channel.handles:
                self._owed = None
            handles = tuple(sorted(channel.handles))
            unacked = tuple(sorted(channel.outstanding))
            by_client = not channel.closing
            if by_client:
                if self.broker_answers_closing:
                    self._unanswered.add(("channel", channel_id))
                else:
                    self._send(c.ChannelClose(channel_id, OK, "OK"))
            return ev.ChannelClosed(
                channel_id, handles, item.reply_code, item.reply_text, by_client, unacked
            )
        if channel.closing:
            # 3.3.7: answer anything but CHANNEL CLOSE with another CHANNEL CLOSE.
            self._send(c.ChannelClose(channel_id, COMMAND_INVALID, "channel is closing"))
            return None
        tag: int = getattr(item, "confirm_tag")  # noqa: B009
        event: ev.Event
        if isinstance(item, c.ChannelAck):
            upto = item.message_nbr
            acked = tuple(sorted(n for n in channel.outstanding if n <= upto))
            for nbr in acked:
                del channel.outstanding[nbr]
            event = ev.Acked(channel_id, acked)
        elif isinstance(item, c.ChannelCommit | c.ChannelRollback):
            if not channel.transacted:
                raise _Fail(
                    "channel",
                    COMMAND_INVALID,
                    f"{item.NAME} on a channel that is not transacted",
                    channel_id,
                )
            if isinstance(item, c.ChannelCommit):
                event = ev.Committed(channel_id)
            else:
                channel.assembly = None  # a partial message is part of the transaction
                event = ev.RolledBack(channel_id)
        else:  # pragma: no cover - _CHANNEL_COMMANDS has only these
            raise AssertionError(item)
        if tag:
            # 3.3.9 says HANDLE REPLY for CHANNEL ACK, which carries no handle: CHANNEL REPLY.
            self._owe_reply("channel", channel_id, c.ChannelReply(channel_id, tag, OK, "OK"))
        return event

    def _channel_open(self, item: c.ChannelOpen, channel: _Channel | None) -> ev.Event | None:
        channel_id = item.channel_id
        if channel_id == 0:
            raise _conn(CHANNEL_ERROR, "channel ids start at 1")
        if channel is not None:
            # 3.3.9: CHANNEL OPEN on an open channel is answered with CHANNEL CLOSE.
            if channel.closing:
                return None
            raise _Fail(
                "channel", COMMAND_INVALID, f"channel {channel_id} is already open", channel_id
            )
        self.channels[channel_id] = _Channel(item.transacted, item.restartable)
        if self.channel_max and len(self.channels) > self.channel_max:
            raise _Fail(
                "channel",
                RESOURCE_ERROR,
                f"more than CHANNEL_MAX {self.channel_max} channels",
                channel_id,
            )
        if item.out_of_band:
            raise _Fail(
                "channel", NOT_IMPLEMENTED, "out-of-band transfer is not supported", channel_id
            )
        if item.confirm_tag:
            self._owe_reply(
                "channel", channel_id, c.ChannelReply(channel_id, item.confirm_tag, OK, "OK")
            )
        return ev.ChannelOpened(channel_id, item.transacted, item.restartable)

    # -- handles --------------------------------------------------------------------------

    def _handle_command(self, item: c.Command) -> ev.Event | None:
        if isinstance(item, c.HandleOpen):
            return self._handle_open(item)
        handle_id: int = getattr(item, "handle_id")  # noqa: B009 - every handle command has one
        handle = self.handles.get(handle_id)
        if handle is None:
            raise _conn(CHANNEL_ERROR, f"{item.NAME} on handle {handle_id}, which is not open")
        channel = self.channels[handle.channel_id]
        if isinstance(item, c.HandleClose):
            self.handles.pop(handle_id)
            channel.handles.discard(handle_id)
            if channel.assembly is not None and channel.assembly.handle_id == handle_id:
                channel.assembly = None
            if not handle.closing and not channel.closing:
                if self.broker_answers_closing:
                    self._unanswered.add(("handle", handle_id))
                else:
                    self._send(c.HandleClose(handle_id, OK, "OK"))
            by_client = not handle.closing
            unacked = tuple(sorted(n for n, h in channel.outstanding.items() if h == handle_id))
            for nbr in unacked:
                del channel.outstanding[nbr]
            return ev.HandleClosed(
                handle.channel_id, handle_id, item.reply_code, item.reply_text, by_client, unacked
            )
        if channel.closing:
            self._send(c.ChannelClose(handle.channel_id, COMMAND_INVALID, "channel is closing"))
            if isinstance(item, c.HandleSend | c.HandlePrepare):
                self._owed = _Owed(handle_id, item)  # its fragment is discarded too
            return None
        if handle.closing:
            if isinstance(item, c.HandleSend | c.HandlePrepare):
                self._owed = _Owed(handle_id, item)
            return None  # 3.5.16: discarded until the client's HANDLE CLOSE
        fail = _Handler(self, handle_id, handle, channel)
        return fail.run(item)

    def _handle_open(self, item: c.HandleOpen) -> ev.Event | None:
        channel = self.channels.get(item.channel_id)
        if channel is None:
            raise _conn(
                CHANNEL_ERROR, f"HANDLE OPEN on channel {item.channel_id}, which is not open"
            )
        if channel.closing:
            self._send(c.ChannelClose(item.channel_id, COMMAND_INVALID, "channel is closing"))
            return None
        existing = self.handles.get(item.handle_id)
        if existing is not None:
            if existing.closing:
                return None
            # 3.5.17: HANDLE OPEN on an open destination is answered with HANDLE CLOSE.
            raise _Fail(
                "handle",
                COMMAND_INVALID,
                f"handle {item.handle_id} is already open",
                item.handle_id,
            )
        try:
            service = ev.ServiceType(item.service_type)
        except ValueError:
            service = None
        handle = _Handle(
            item.channel_id,
            service or ev.ServiceType.QUEUE,
            item.dest_name,
            item.producer,
            item.consumer,
            item.browser,
            item.temporary,
        )
        self.handles[item.handle_id] = handle
        channel.handles.add(item.handle_id)
        if service is None:
            raise _Fail(
                "handle",
                SYNTAX_ERROR,
                f"service type {item.service_type} is not 1, 2 or 3",
                item.handle_id,
            )
        if service is ev.ServiceType.PEER:
            raise _Fail(
                "handle", NOT_IMPLEMENTED, "peer services are not supported", item.handle_id
            )
        if self.handle_max and len(self.handles) > self.handle_max:
            raise _Fail(
                "handle",
                RESOURCE_ERROR,
                f"more than HANDLE_MAX {self.handle_max} handles",
                item.handle_id,
            )
        if item.temporary:
            if not item.dest_name:
                self._temporaries += 1
                handle.dest_name = f"{self.temporary_prefix}.{self._temporaries}"
            # 3.5.2.2: HANDLE CREATED goes before the HANDLE REPLY.
            self._send(c.HandleCreated(item.handle_id, handle.dest_name))
        if item.confirm_tag:
            self._owe_reply(
                "handle", item.handle_id, c.HandleReply(item.handle_id, item.confirm_tag, OK, "OK")
            )
        return ev.HandleOpened(
            item.channel_id,
            item.handle_id,
            service,
            handle.dest_name,
            item.producer,
            item.consumer,
            item.browser,
            item.temporary,
            item.mime_type or "application/octet-stream",
            item.encoding or "binary",
            item.options,
        )

    # -- fragments ------------------------------------------------------------------------

    def _fragment(self, fragment: Fragment) -> ev.Event | None:
        owed, self._owed = self._owed, None
        if owed is None:
            return None  # the announcing command was discarded (closing handle or channel)
        handle = self.handles.get(owed.handle_id)
        if handle is None or handle.closing:
            return None
        channel = self.channels[handle.channel_id]
        if channel.closing:
            return None
        command = owed.command
        assembly = channel.assembly
        if isinstance(command, c.HandlePrepare):
            assembly = channel.assembly = _Assembly(
                owed.handle_id, content_hash=command.content_hash
            )
            self._take(assembly, fragment.data, owed.handle_id)
            body_held = len(assembly.body)
            self._send(c.HandleReady(owed.handle_id, body_held))
            return None
        if assembly is None:
            assembly = channel.assembly = _Assembly(owed.handle_id)
        self._take(assembly, fragment.data, owed.handle_id)
        if command.partial:
            self._reply_send(command, owed.handle_id)
            return None
        channel.assembly = None
        header = assembly.header
        if header is None:
            raise _Fail(
                "handle", SYNTAX_ERROR, "message ended inside its header block", owed.handle_id
            )
        if len(assembly.body) != header.body_size:
            raise _Fail(
                "handle",
                SYNTAX_ERROR,
                f"message ended after {len(assembly.body)} of {header.body_size} body octets",
                owed.handle_id,
            )
        body = bytes(assembly.body)
        if assembly.content_hash:
            digest = hashlib.sha1(body, usedforsecurity=False).hexdigest()
            if digest != assembly.content_hash.lower():
                raise _Fail("handle", INVALID_CONTENTS, "content-hash mismatch", owed.handle_id)
        if self.dictionary:
            header.headers = {self.dictionary.get(k, k): v for k, v in header.headers.items()}
        self._reply_send(command, owed.handle_id)
        return ev.MessageReceived(
            handle.channel_id,
            owed.handle_id,
            handle.dest_name + command.dest_name,
            header,
            body,
            channel.transacted,
        )

    def _take(self, assembly: _Assembly, data: bytes, handle_id: int) -> None:
        if assembly.header is None:
            assembly.head += data
            try:
                header, end = c.MessageHeader.decode(bytes(assembly.head))
            except AMQPError:
                # A header block split over fragments: wait for more unless it cannot fit.
                if len(assembly.head) > self.frame_max:
                    raise _Fail(
                        "handle", SYNTAX_ERROR, "malformed message header", handle_id
                    ) from None
                return
            assembly.header = header
            assembly.body += assembly.head[end:]
            assembly.head.clear()
        else:
            assembly.body += data
        if len(assembly.body) > assembly.header.body_size:
            raise _Fail("handle", SYNTAX_ERROR, "message body longer than its body-size", handle_id)

    def _reply_send(self, command: c.HandleSend | c.HandlePrepare, handle_id: int) -> None:
        if isinstance(command, c.HandleSend) and command.confirm_tag:
            self._owe_reply(
                "handle", handle_id, c.HandleReply(handle_id, command.confirm_tag, OK, "OK")
            )


class _Handler:
    """The checks and events of one handle command (kept apart to keep FastServer readable)."""

    def __init__(
        self, server: FastServer, handle_id: int, handle: _Handle, channel: _Channel
    ) -> None:
        self.server = server
        self.handle_id = handle_id
        self.handle = handle
        self.channel = channel

    def fail(self, code: int, text: str) -> _Fail:
        return _Fail("handle", code, text, self.handle_id)

    def confirm(self, tag: int) -> None:
        if tag:
            self.server._owe_reply(
                "handle", self.handle_id, c.HandleReply(self.handle_id, tag, OK, "OK")
            )

    def run(self, item: c.Command) -> ev.Event | None:
        handle, channel_id = self.handle, self.handle.channel_id
        if isinstance(item, c.HandleSend | c.HandlePrepare):
            return self.send(item)
        if isinstance(item, c.HandleConsume):
            if not handle.consumer:
                raise self.fail(ACCESS_REFUSED, "handle was not opened as a consumer")
            if item.prefetch < 1:
                raise self.fail(SYNTAX_ERROR, "prefetch is at least 1")
            if item.identifier and handle.service is not ev.ServiceType.TOPIC:
                raise self.fail(COMMAND_INVALID, "only topic subscriptions have an identifier")
            if item.identifier and handle.temporary:
                raise self.fail(COMMAND_INVALID, "no durable subscription on a temporary topic")
            handle.consuming = True
            handle.prefetch = item.prefetch
            handle.unreliable = item.unreliable
            self.confirm(item.confirm_tag)
            return ev.ConsumeRequested(
                channel_id,
                self.handle_id,
                handle.dest_name + item.dest_name,
                item.prefetch,
                item.no_local,
                item.unreliable,
                item.identifier,
                item.selector,
                item.mime_type,
            )
        if isinstance(item, c.HandleCancel):
            if handle.service is not ev.ServiceType.TOPIC or not item.identifier:
                raise self.fail(COMMAND_INVALID, "HANDLE CANCEL ends a named topic subscription")
            self.confirm(item.confirm_tag)
            return ev.CancelRequested(
                channel_id, self.handle_id, handle.dest_name + item.dest_name, item.identifier
            )
        if isinstance(item, c.HandleFlow):
            handle.paused = item.flow_pause
            self.confirm(item.confirm_tag)
            return ev.FlowChanged(channel_id, self.handle_id, item.flow_pause)
        if isinstance(item, c.HandleUnget):
            if handle.service is not ev.ServiceType.QUEUE:
                raise self.fail(COMMAND_INVALID, "HANDLE UNGET is for queues only")
            if self.channel.outstanding.get(item.message_nbr) != self.handle_id:
                raise self.fail(NOT_FOUND, f"message {item.message_nbr} is not held by this handle")
            del self.channel.outstanding[item.message_nbr]
            self.confirm(item.confirm_tag)
            return ev.UngetRequested(channel_id, self.handle_id, item.message_nbr)
        if isinstance(item, c.HandleQuery):
            if not handle.browser:
                raise self.fail(ACCESS_REFUSED, "handle was not opened as a browser")
            return ev.QueryRequested(
                channel_id,
                self.handle_id,
                item.message_nbr,
                handle.dest_name + item.dest_name,
                item.selector,
                item.mime_type,
            )
        if isinstance(item, c.HandleBrowse):
            if not handle.browser:
                raise self.fail(ACCESS_REFUSED, "handle was not opened as a browser")
            return ev.BrowseRequested(
                channel_id, self.handle_id, item.confirm_tag, item.message_nbr
            )
        raise AssertionError(item)  # pragma: no cover - _HANDLE_COMMANDS has only these

    def send(self, item: c.HandleSend | c.HandlePrepare) -> ev.Event | None:
        handle, channel = self.handle, self.channel
        if not handle.producer:
            raise self.fail(ACCESS_REFUSED, "handle was not opened as a producer")
        if isinstance(item, c.HandlePrepare):
            if not channel.restartable:
                raise self.fail(COMMAND_INVALID, "HANDLE PREPARE needs a restartable channel")
        else:
            if item.out_of_band:
                raise self.fail(NOT_IMPLEMENTED, "out-of-band transfer is not supported")
            if item.streaming:
                raise self.fail(NOT_IMPLEMENTED, "streaming is for peer services")
        assembly = channel.assembly
        if assembly is not None and assembly.handle_id != self.handle_id:
            raise _Fail(
                "channel",
                COMMAND_INVALID,
                "fragments of two messages mixed on one channel",
                handle.channel_id,
            )
        if isinstance(item, c.HandlePrepare) and assembly is not None:
            raise self.fail(COMMAND_INVALID, "HANDLE PREPARE inside a message")
        if isinstance(item, c.HandleSend) and item.recovery and assembly is None:
            raise self.fail(COMMAND_INVALID, "recovery without a HANDLE PREPARE")
        self.server._owed = _Owed(self.handle_id, item)
        if item.fragment_size == 0:
            # Nothing follows in the stream: take the empty fragment now.
            return self.server._fragment(Fragment(b""))
        return None
