"""What the 1.0 front end's links ask of their session, and the session of its connection:
``SessionCore`` (the base of ``session.Session``) and ``ConnectionCore`` (the base of
``connection.AMQP10Connection``).

They stand below the links (``links.py``, ``management.py``, ``coordinator.py``), the
session and the connection, so that a link holds its session and a session its connection
without importing the modules above it. Both are compiled with the links: a transfer's
calls (``send``, ``settle_incoming``, ``published``) stay native calls on compiled classes.
Imported by those modules only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from leveret.convert.amqp10 import first_sections, split_payload
from leveret.protocol.amqp10 import Error, Properties, Role
from leveret.protocol.amqp10.types import decode_value

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.broker import Client
    from leveret.model.completion import Completion
    from leveret.model.message import Message
    from leveret.model.publisher import Publisher
    from leveret.model.queues.base import Queue
    from leveret.model.settle import Delivery
    from leveret.model.timers import Timers
    from leveret.model.vhost import VirtualHost
    from leveret.protocol.amqp10 import Connection
    from leveret.protocol.amqp10.types import Value
    from leveret.server.amqp10.transactions import Transactions
    from leveret.server.guard import Guard

__all__ = ["AttachedLink", "ConnectionCore", "SessionCore"]

_PROPERTIES = 0x73


class AttachedLink(Protocol):
    """What a session does with any of its links: find it by handle, close it."""

    @property
    def handle(self) -> int: ...

    def close(self) -> None: ...


class ConnectionCore:
    """The connection as its sessions see it; ``AMQP10Connection`` fills it in."""

    machine: Connection
    client: Client | None
    guard: Guard | None
    transactions: Transactions | None

    def send_transfer(self, channel: int, handle: int, payload: bytes, settled: bool) -> int:
        raise NotImplementedError

    def wrote(self) -> None:
        raise NotImplementedError

    def published_on(self, publisher: Publisher) -> None:
        """``publisher`` took a message this turn: its confirms go out at the turn's end."""
        raise NotImplementedError

    def defer(self, completion: Completion[Any], then: Callable[[], None]) -> None:
        """The connection's further input waits until ``completion`` is done; then
        ``then()`` runs (in a turn of the connection's shell)."""
        raise NotImplementedError


class SessionCore:
    """One 1.0 session as its links see it: where they send, settle and publish."""

    def __init__(self, conn: ConnectionCore, channel: int) -> None:
        self.conn = conn
        self.channel = channel
        client = conn.client
        assert client is not None
        self.client = client
        self.vhost: VirtualHost = client.vhost
        guard = conn.guard
        assert guard is not None
        # The connection's access checks, asked before the core acts (server/guard.py).
        self.guard = guard
        self.timers: Timers = self.vhost.timers
        self.links: dict[int, AttachedLink] = {}
        self.unsettled: dict[int, Delivery] = {}
        self.writable = True
        self.closed = False
        # Consumers' queues letting them go after their links closed (``Session.detached``),
        # and, once the session is closed, all of them (what the answer to its end waits
        # for; None: nothing).
        self.withdrawing: list[Completion[None]] = []
        self.withdrawn: Completion[None] | None = None
        self.check_user_id = True
        transactions = conn.transactions
        assert transactions is not None
        self.transactions = transactions

    def send(self, handle: int, payload: bytes, settled: bool) -> int:
        return self.conn.send_transfer(self.channel, handle, payload, settled)

    def drained(self, handle: int) -> None:
        self.conn.machine.drained(self.channel, handle)
        self.conn.wrote()

    def settle_incoming(self, first: int, last: int, state: Value) -> None:
        if self.closed:
            return
        self.conn.machine.settle(self.channel, first, last, role=Role.RECEIVER, state=state)
        self.conn.wrote()

    def published(self, publisher: Publisher) -> None:
        self.conn.published_on(publisher)

    def check_user(self, message: Message) -> None:
        """RabbitMQ's rule: a user-id property must be the authenticated user (unless the
        user is an impersonator)."""
        self.guard.check_user_id(message.properties.user_id)

    def to_and_subject(self, payload: bytes) -> tuple[str | None, str | None]:
        """A message's ``to`` and ``subject`` (read only for the links that need them)."""
        where = first_sections(split_payload(payload)[0]).get(_PROPERTIES)
        if where is None:
            return None, None
        props, _ = decode_value(payload, where[0])
        if not isinstance(props, Properties):
            return None, None
        to = props.to if isinstance(props.to, str) else None
        return to, props.subject

    def link_lost(self, link: AttachedLink, error: Error) -> None:
        """Detach ``link`` from our side (its queue went)."""
        self.links.pop(link.handle, None)
        link.close()
        if not self.closed:
            self.conn.machine.detach(self.channel, link.handle, error=error)
            self.conn.wrote()

    def delete_queue(self, queue: Queue) -> None:
        if self.vhost.find_queue(queue.name) is queue:
            self.vhost.remove_queue(queue)
