"""Events the AMQP 1.0 connection machine hands to its user (a broker front end or a client).

Each exchange that ends something (``close``, ``end``, ``detach``) yields exactly one
``…Closed``/``…Ended``/``…Detached`` event, with ``local=True`` when this side started it
(on the peer's answer, or at once when the machine itself ended it for a protocol error).
:class:`MessageReceived` and :class:`DispositionReceived` come once per message or batch,
so they are ``NamedTuple``s built without Python-level ``__init__`` (a frozen dataclass's
field-by-field ``__setattr__`` would cost more than decoding the transfer); the rest are
frozen dataclasses. Only ``leveret.protocol.amqp10`` and its users import this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from leveret.protocol.amqp10._generated.composites import Error, Source, Target
    from leveret.protocol.amqp10.types import Value

__all__ = [
    "ConnectionClosed",
    "ConnectionOpened",
    "CreditGranted",
    "DispositionReceived",
    "Event",
    "FlowReceived",
    "LinkAttachRequested",
    "LinkAttached",
    "LinkDetached",
    "MessageReceived",
    "SaslAuthRequested",
    "SaslOutcomeReceived",
    "SessionBegun",
    "SessionEnded",
]


@dataclass(frozen=True, slots=True)
class SaslAuthRequested:
    """Server: the client chose ``mechanism``; answer with ``Connection.answer_sasl``.

    ``username``/``password`` come from a PLAIN response, ``authzid`` from PLAIN or EXTERNAL
    (EXTERNAL's identity is the transport's, e.g. the TLS client certificate), ``trace``
    from ANONYMOUS.
    """

    mechanism: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    authzid: str | None = None
    trace: str | None = None
    hostname: str | None = None


@dataclass(frozen=True, slots=True)
class SaslOutcomeReceived:
    """Client: the server's verdict (``code`` 0 is ok, see ``SaslCode``)."""

    code: int
    additional_data: bytes | None = None


@dataclass(frozen=True, slots=True)
class ConnectionOpened:
    """The peer's ``open`` arrived; the limits are the peer's."""

    container_id: str
    hostname: str | None
    max_frame_size: int
    channel_max: int
    idle_time_out: int | None
    offered_capabilities: tuple[str, ...] | None
    desired_capabilities: tuple[str, ...] | None
    properties: dict[Value, Value] | None


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is over (the transport may be closed once the output is flushed);
    its sessions and links end with it, without events of their own."""

    error: Error | None
    local: bool


@dataclass(frozen=True, slots=True)
class SessionBegun:
    """A session is mapped: ``channel`` is ours (the one to pass to every method)."""

    channel: int
    remote_channel: int
    incoming_window: int
    outgoing_window: int
    handle_max: int
    properties: dict[Value, Value] | None


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """The session is over; its links end with it, without events of their own."""

    channel: int
    error: Error | None
    local: bool


@dataclass(frozen=True, slots=True)
class LinkAttachRequested:
    """The peer attached a link; answer with ``accept_link`` or ``refuse_link``.

    ``handle`` is ours for this link; ``role`` is the role *we* will play (the opposite of the
    peer's): ``Role.SENDER`` for a consumer's link, ``Role.RECEIVER`` for a publisher's.
    ``source`` carries the filters (``rabbitmq:stream-offset-spec``, …) in ``source.filter``.
    """

    channel: int
    handle: int
    name: str
    role: bool
    source: Source | None
    target: Value
    snd_settle_mode: int
    rcv_settle_mode: int
    initial_delivery_count: int | None
    max_message_size: int | None
    properties: dict[Value, Value] | None
    desired_capabilities: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class LinkAttached:
    """Our ``attach`` was answered; the terminus fields are the peer's (None: refused, a
    ``detach`` follows)."""

    channel: int
    handle: int
    name: str
    role: bool
    source: Source | None
    target: Target | Value
    snd_settle_mode: int
    rcv_settle_mode: int
    max_message_size: int | None
    properties: dict[Value, Value] | None


@dataclass(frozen=True, slots=True)
class LinkDetached:
    channel: int
    handle: int
    closed: bool
    error: Error | None
    local: bool


@dataclass(frozen=True, slots=True)
class CreditGranted:
    """Our sending link may send ``credit`` more messages; ``drain``: send what is available,
    then call ``Connection.drained`` to give up the rest."""

    channel: int
    handle: int
    credit: int
    drain: bool


@dataclass(frozen=True, slots=True)
class FlowReceived:
    """The sender of our receiving link told its state (after a drain: ``credit`` 0)."""

    channel: int
    handle: int
    delivery_count: int
    credit: int
    available: int | None
    drain: bool


class MessageReceived(NamedTuple):
    """A whole message arrived on our receiving link ``handle`` (all its frames joined)."""

    channel: int
    handle: int
    delivery_id: int
    delivery_tag: bytes
    settled: bool
    payload: bytes
    message_format: int
    state: Value  # a transactional-state when it is part of a transaction


class DispositionReceived(NamedTuple):
    """The peer settled or updated deliveries ``first``..``last`` (delivery ids of the session;
    ``role`` is the peer's, so ``Role.RECEIVER`` means our outgoing deliveries)."""

    channel: int
    role: bool
    first: int
    last: int
    settled: bool
    state: Value
    batchable: bool


Event = (
    SaslAuthRequested
    | SaslOutcomeReceived
    | ConnectionOpened
    | ConnectionClosed
    | SessionBegun
    | SessionEnded
    | LinkAttachRequested
    | LinkAttached
    | LinkDetached
    | CreditGranted
    | FlowReceived
    | MessageReceived
    | DispositionReceived
)
