"""Events the AMQP/Fast server machine hands to a broker front end (``server.FastServer``).

Each says what the client asked for, in the RFC's words; the front end maps them onto the
core: a queue service's destination onto a queue, a topic service's onto a topic exchange
(durable subscriptions onto named queues bound to it), HANDLE SEND onto a publish,
HANDLE CONSUME onto a consumer with ``prefetch`` credit, CHANNEL ACK / HANDLE UNGET onto
settle accept / release, transacted channels onto core transactions. Any layer may import it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.protocol.amqpfast.commands import MessageHeader
    from leveret.protocol.amqpfast.fieldtable import FastTable

__all__ = [
    "Acked",
    "BrowseRequested",
    "CancelRequested",
    "ChannelClosed",
    "ChannelOpened",
    "Committed",
    "ConnectionClosed",
    "ConsumeRequested",
    "Event",
    "FlowChanged",
    "HandleClosed",
    "HandleOpened",
    "LoginRequested",
    "MessageReceived",
    "OpenRequested",
    "QueryRequested",
    "RolledBack",
    "ServiceType",
    "UngetRequested",
]


class ServiceType(enum.IntEnum):
    """HANDLE OPEN's service-type (3.5.2.1)."""

    QUEUE = 1
    TOPIC = 2
    PEER = 3


class Event:
    """Base of every event."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class LoginRequested(Event):
    """CONNECTION RESPONSE: answer with ``accept_login()`` or ``refuse_login()``.

    PLAIN carries LOGIN and PASSWORD; NONE carries neither (both empty here).
    """

    mechanism: str
    login: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class OpenRequested(Event):
    """CONNECTION OPEN: answer with ``accept_open()`` or ``refuse_open()``.

    ``client_name`` identifies durable subscriptions; the RFC has the server allow one
    connection per client name at a time (the front end's check, it sees every connection).
    """

    virtual_path: str
    client_name: str
    options: FastTable


@dataclass(frozen=True, slots=True)
class ChannelOpened(Event):
    channel_id: int
    transacted: bool
    restartable: bool


@dataclass(frozen=True, slots=True)
class ChannelClosed(Event):
    """The channel and ``handle_ids`` are gone: roll back its transaction, drop consumers,
    and give back the ``unacked`` messages (delivered, never acknowledged)."""

    channel_id: int
    handle_ids: tuple[int, ...]
    reply_code: int
    reply_text: str
    by_client: bool
    unacked: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class HandleOpened(Event):
    """``dest_name`` is the full name (the server's choice for a nameless temporary one)."""

    channel_id: int
    handle_id: int
    service: ServiceType
    dest_name: str
    producer: bool
    consumer: bool
    browser: bool
    temporary: bool
    mime_type: str
    encoding: str
    options: FastTable


@dataclass(frozen=True, slots=True)
class HandleClosed(Event):
    """The handle is gone. Its ``unacked`` messages can no longer be acknowledged (CHANNEL
    ACK covers open destinations only, 3.3.3): the front end gives them back."""

    channel_id: int
    handle_id: int
    reply_code: int
    reply_text: str
    by_client: bool
    unacked: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MessageReceived(Event):
    """A whole message from HANDLE SEND (all its fragments), to ``destination``.

    ``destination`` is the HANDLE OPEN name followed by the last HANDLE SEND's (3.5.2.3);
    header names the client aliased in its CONNECTION TUNE dictionary are already expanded.
    """

    channel_id: int
    handle_id: int
    destination: str
    header: MessageHeader
    body: bytes
    transacted: bool


@dataclass(frozen=True, slots=True)
class ConsumeRequested(Event):
    channel_id: int
    handle_id: int
    destination: str
    prefetch: int
    no_local: bool
    unreliable: bool
    identifier: str
    selector: bytes
    mime_type: str


@dataclass(frozen=True, slots=True)
class CancelRequested(Event):
    """HANDLE CANCEL: end the durable topic subscription ``identifier``."""

    channel_id: int
    handle_id: int
    destination: str
    identifier: str


@dataclass(frozen=True, slots=True)
class FlowChanged(Event):
    channel_id: int
    handle_id: int
    paused: bool


@dataclass(frozen=True, slots=True)
class UngetRequested(Event):
    """HANDLE UNGET: give message ``message_nbr`` back to its queue (not acknowledged)."""

    channel_id: int
    handle_id: int
    message_nbr: int


@dataclass(frozen=True, slots=True)
class Acked(Event):
    """CHANNEL ACK: these delivered (and not ungot) messages are acknowledged, in order."""

    channel_id: int
    message_nbrs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Committed(Event):
    channel_id: int


@dataclass(frozen=True, slots=True)
class RolledBack(Event):
    channel_id: int


@dataclass(frozen=True, slots=True)
class QueryRequested(Event):
    """HANDLE QUERY: answer with ``index()``."""

    channel_id: int
    handle_id: int
    message_nbr: int
    destination: str
    selector: bytes
    mime_type: str


@dataclass(frozen=True, slots=True)
class BrowseRequested(Event):
    """HANDLE BROWSE: answer with ``notify(..., delivered=False)`` or ``browse_missing()``."""

    channel_id: int
    handle_id: int
    confirm_tag: int
    message_nbr: int


@dataclass(frozen=True, slots=True)
class ConnectionClosed(Event):
    """The connection is over; the front end closes the socket once output is flushed.
    With ``broker_answers_closing``, the client's CLOSE of an open connection is answered
    first (``FastServer.answer_close``; the machine is in ``CLOSE_RECEIVED``)."""

    reply_code: int
    reply_text: str
    by_client: bool
