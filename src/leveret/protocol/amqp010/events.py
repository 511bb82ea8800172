"""Events the AMQP 0-10 connection machine hands its owner; the amqp010 package and front end.

Nouns or past participles (STYLE.md): each is a frozen record of something the peer did or
that the machine concluded.  Session events carry the channel the session is attached to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.protocol.amqp010._generated.commands import ExecutionException
    from leveret.protocol.amqp010.sequence import SequenceSet
    from leveret.protocol.amqp010.types import Command, Struct, Value

__all__ = [
    "CommandReceived",
    "CommandsCompleted",
    "ConnectionClosed",
    "ConnectionFailed",
    "ConnectionOpened",
    "Event",
    "ExceptionReceived",
    "OpenRequested",
    "Redirected",
    "ResultReceived",
    "SecureOkReceived",
    "SecureReceived",
    "SessionAttached",
    "SessionDetached",
    "StartOkReceived",
    "StartReceived",
    "Tuned",
]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""


# -- connection ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartReceived(Event):
    """(client) ``connection.start``: answer with :meth:`Connection.start_ok`."""

    server_properties: dict[str, Value]
    mechanisms: list[str]
    locales: list[str]


@dataclass(frozen=True, slots=True)
class StartOkReceived(Event):
    """(server) The client chose a SASL mechanism: decide with ``accept_auth``, ``challenge``
    or ``close``."""

    mechanism: str
    response: bytes = field(repr=False)
    client_properties: dict[str, Value]
    locale: str


@dataclass(frozen=True, slots=True)
class SecureReceived(Event):
    """(client) ``connection.secure``: answer with :meth:`Connection.secure_ok`."""

    challenge: bytes


@dataclass(frozen=True, slots=True)
class SecureOkReceived(Event):
    """(server) The client's answer to a challenge: decide as for :class:`StartOkReceived`."""

    response: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Tuned(Event):
    """Tuning is agreed (``tune-ok`` sent or received); ``heartbeat`` 0 means none."""

    channel_max: int
    max_frame_size: int
    heartbeat: int


@dataclass(frozen=True, slots=True)
class OpenRequested(Event):
    """(server) ``connection.open``: answer with ``open_ok`` or ``close`` (402 invalid-path)."""

    virtual_host: str
    capabilities: list[str]
    insist: bool


@dataclass(frozen=True, slots=True)
class ConnectionOpened(Event):
    """The connection is open (client: ``open-ok`` received; server: ``open-ok`` sent)."""

    known_hosts: list[str]


@dataclass(frozen=True, slots=True)
class Redirected(Event):
    """(client) The server sent ``connection.redirect`` instead of ``open-ok``."""

    host: str
    known_hosts: list[str]


@dataclass(frozen=True, slots=True)
class ConnectionClosed(Event):
    """The close handshake finished (or the peer closed): close the socket once flushed.
    A server with ``broker_answers_close`` has the peer's close to answer first
    (``answer_close``; the machine is in ``CLOSE_RECEIVED``)."""

    reply_code: int
    reply_text: str
    by_peer: bool


@dataclass(frozen=True, slots=True)
class ConnectionFailed(Event):
    """The machine gave up without a handshake: heartbeat timeout, bad protocol header, or
    a rule the spec says ends the connection at once.  Close the socket once flushed."""

    reason: str


# -- sessions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionAttached(Event):
    """A session is attached to ``channel``; ``resumed`` if it held state from before."""

    channel: int
    name: bytes
    resumed: bool


@dataclass(frozen=True, slots=True)
class SessionDetached(Event):
    """A session left ``channel`` (``code`` is a session.detach-code)."""

    channel: int
    name: bytes
    code: int
    by_peer: bool


@dataclass(frozen=True, slots=True)
class CommandReceived(Event):
    """A whole command, with its id, header segment and body as they arrived.

    The owner completes it with :meth:`Connection.complete` when it is done (for a transfer:
    when the message is enqueued, or on disk if it must be).
    """

    channel: int
    command_id: int
    command: Command
    sync: bool
    header: bytes | None = field(default=None, repr=False)
    body: bytes | None = field(default=None, repr=False)

    def header_structs(self) -> list[Struct]:
        """The header segment decoded (delivery-properties, message-properties, ...)."""
        from leveret.protocol.amqp010.ops import decode_header

        return decode_header(self.header) if self.header is not None else []


@dataclass(frozen=True, slots=True)
class CommandsCompleted(Event):
    """The peer completed these commands we sent (``session.completed``)."""

    channel: int
    commands: SequenceSet


@dataclass(frozen=True, slots=True)
class ResultReceived(Event):
    """``execution.result`` for the command ``command_id`` we sent."""

    channel: int
    command_id: int
    value: Struct | None


@dataclass(frozen=True, slots=True)
class ExceptionReceived(Event):
    """``execution.exception``: a command we sent failed."""

    channel: int
    exception: ExecutionException
