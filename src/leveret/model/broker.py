"""The broker: its virtual hosts and the model side of client connections.

``Client`` is one connection of any protocol: it holds what the front end attached to it
(channels, sessions: anything with ``close`` and ``set_writable``) and the exclusive queues
it declared; closing it closes the attachments (which requeue what they had not settled)
and then deletes those queues, in that order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from leveret.model.dtx import Coordinator
from leveret.model.journal import NULL_JOURNAL, Journal
from leveret.model.memory_gauge import MemoryGauge
from leveret.model.queues.stream_log import MemoryStreamBackend, StreamBackend
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.paging import Pager
    from leveret.model.queues import Queue

# RabbitMQ's default consumer_timeout: 30 minutes.
DEFAULT_CONSUMER_TIMEOUT = 1800.0


class Broker:
    """Virtual hosts by name; '/' always exists."""

    def __init__(self, *, consumer_timeout: float | None = DEFAULT_CONSUMER_TIMEOUT) -> None:
        self.gauge = MemoryGauge()
        # Seconds a consumer may keep a delivery unacked before it is cancelled; None = off.
        self.consumer_timeout = consumer_timeout
        # Every deadline of the broker (TTLs, x-expires, consumer timeouts): one timer.
        self.timers = Timers()
        self.vhosts: dict[str, VirtualHost] = {"/": VirtualHost("/", self.gauge, self.timers)}
        # Told of every queue removed from any vhost (``VirtualHost.queue_listeners``).
        self.queue_listeners: list[Callable[[Queue], None]] = []
        self.vhosts["/"].queue_listeners = self.queue_listeners
        self.clients: set[Client] = set()
        self.journal: Journal = NULL_JOURNAL
        self.pager: Pager | None = None
        self.stream_backend: StreamBackend = MemoryStreamBackend()
        # Distributed (XA) transaction branches of every front end that speaks XA.
        self.dtx = Coordinator(self.timers)
        # The cluster name clients are told (0-9-1 server properties), which federation
        # links on other brokers use to cut loops; the server keeps it equal to its
        # cluster_name parameter. None: the front end's default (leveret@<host>).
        self.cluster_name: str | None = None

    def add_vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(name, self.gauge, self.timers)
            vhost.journal = self.journal
            vhost.stream_backend = self.stream_backend
            vhost.queue_listeners = self.queue_listeners
        return vhost

    def attach_streams(self, backend: StreamBackend) -> None:
        """Stream queues declared from now on keep their logs in ``backend`` (the server
        calls this before recovery, so recovered streams open their files)."""
        self.stream_backend = backend
        for vhost in self.vhosts.values():
            vhost.stream_backend = backend

    def attach_journal(self, journal: Journal) -> None:
        """From now on durable changes go to ``journal`` (the server calls this once
        recovery has rebuilt what the store held, so recovery itself writes nothing)."""
        self.journal = journal
        for vhost in self.vhosts.values():
            vhost.journal = journal
            for queue in vhost.queues.values():
                queue.journal = journal

    def attach_pager(self, pager: Pager) -> None:
        """Deep queues page their tails to ``pager`` from now on (the server calls this
        before recovery, so that recovering a deep queue pages too)."""
        self.pager = pager
        for vhost in self.vhosts.values():
            vhost.pager = pager
            for queue in vhost.queues.values():
                queue.pager = pager

    def connect(self, vhost: VirtualHost, user: str, name: str) -> Client:
        client = Client(self, vhost, user, name)
        self.clients.add(client)
        return client


class Attachment(Protocol):
    """What a front end attaches to a client: a channel's or a session's model state."""

    def close(self) -> None: ...

    def set_writable(self, writable: bool) -> None: ...


class Client:
    """The model side of one client connection."""

    def __init__(self, broker: Broker, vhost: VirtualHost, user: str, name: str) -> None:
        self.broker = broker
        self.vhost = vhost
        self.user = user
        self.name = name
        self.sessions: dict[int, Attachment] = {}
        self.writable = True
        self.closed = False

    def __repr__(self) -> str:
        return f"Client({self.name!r})"

    def attach(self, number: int, session: Attachment) -> None:
        """``session`` is the front end's ``number`` (a channel, a session) from now on."""
        if not self.writable:
            session.set_writable(False)
        self.sessions[number] = session

    def close_session(self, number: int) -> None:
        session = self.sessions.pop(number, None)
        if session is not None:
            session.close()

    def set_writable(self, writable: bool) -> None:
        """Pause or resume deliveries to every session (transport backpressure)."""
        self.writable = writable
        for session in list(self.sessions.values()):
            session.set_writable(writable)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for number in list(self.sessions):
            self.close_session(number)
        for queue in self.vhost.owned_queues(self):
            self.vhost.remove_queue(queue)
        if self.vhost.shared is not None:
            self.vhost.shared.owner_gone(self)
        self.broker.clients.discard(self)
