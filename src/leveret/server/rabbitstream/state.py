"""What every stream-protocol connection of a broker shares: the listener's settings, the
open connections (a stream removed from the broker's model by any means, whatever front
end, verb, expiry or other node deleted it, is told to its publishers and subscribers on
every connection, through the model's ``Broker.queue_listeners``), and the
single-active-consumer groups.

Single active consumer (RabbitMQ 3.11's, for streams): subscriptions with the properties
``single-active-consumer=true`` and ``name=<group>`` on one stream form a group (a
:class:`Group`); one member is active, the rest wait. The active one is told with a
``consumer_update`` (active) and answers with where to start; only then is it attached to
the stream. Which member is active is RabbitMQ's ``evaluate_active_consumer``:

- a plain group (``partition`` -1): the first in subscription order; when it goes
  (unsubscribed, connection closed, stream deleted) the next one becomes active;
- a super stream partition's group (the subscription named its super stream with the
  ``super-stream`` property, and the stream is its partition with order ``i``): the member
  at ``i mod len(members)``, so the consumers of a super stream spread its partitions
  among themselves. When a member joins or leaves and that choice moves, the active one
  is first told to step down (``consumer_update``, not active; it is detached at once);
  only when it has answered (or gone) is the new choice activated.

Imported by the stream-protocol connection and the listener.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from leveret.model.queues.stream import StreamQueue

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.model.queues import Queue


class Connection(Protocol):
    """A stream-protocol connection as the broker-wide state sees it."""

    def stream_gone(self, queue: StreamQueue) -> None:
        """``queue`` was removed: its publishers and subscribers here are told."""
        ...


class Member(Protocol):
    """A subscription as its group sees it."""

    def activate(self) -> None:
        """It became the active one: tell the client, attach once it answers."""
        ...

    def deactivate(self) -> None:
        """It must step down: detach, tell the client; ``StreamServer.stepped_down`` when
        the client has answered."""
        ...


@dataclass(eq=False)
class Group:
    """The members of one single-active-consumer group, in subscription order."""

    partition: int = -1  # the stream's partition order in its super stream; -1: none
    members: list[Member] = field(default_factory=list)
    active: Member | None = None  # told it is active (or being told)
    stepping_down: Member | None = None  # told to step down, its answer awaited

    def choice(self) -> Member | None:
        """The member that should be active (RabbitMQ's ``evaluate_active_consumer``)."""
        if not self.members:
            return None
        if self.partition < 0:
            return self.members[0]
        return self.members[self.partition % len(self.members)]

    def settle(self) -> None:
        """Move towards the choice: activate it when nobody is active, or ask the active
        one to step down when the choice moved (one step at a time)."""
        if self.stepping_down is not None:
            return
        choice = self.choice()
        if choice is None:
            return
        if self.active is None:
            self.active = choice
            choice.activate()
        elif self.active is not choice and self.partition >= 0:
            self.stepping_down, self.active = self.active, None
            self.stepping_down.deactivate()


@dataclass
class StreamSettings:
    """What the stream listener offers and advertises."""

    frame_max: int = 1048576  # RabbitMQ's stream default (1 MiB)
    heartbeat: int = 60
    host: str = "localhost"  # the broker's address in metadata responses
    port: int = 5552
    tls_port: int = 5551  # the port told to a client connected over TLS (RabbitMQ's tls_port)


@dataclass
class StreamServer:
    """The broker-wide state of the stream protocol; see the module docstring."""

    broker: Broker
    users: UserStore
    settings: StreamSettings = field(default_factory=StreamSettings)
    connections: set[Connection] = field(default_factory=set)
    groups: dict[tuple[str, str, str], Group] = field(default_factory=dict)
    # On a cluster node: (vhost, stream, tls) -> the other node leading that stream, with
    # its stream listener's host and port (its TLS one when tls: the asking client came
    # over TLS); ``metadata`` names it. None on a single node.
    stream_leader: Callable[[str, str, bool], tuple[str, str, int] | None] | None = None
    # On a cluster node: (vhost, stream, tls) -> its running replicas besides the leader,
    # as (node, host, port); node "" is this node.
    stream_replicas: Callable[[str, str, bool], list[tuple[str, str, int]]] | None = None
    # On a cluster node: (vhost, stream) -> the stream as this node reads it from its copy
    # when it is a replica (subscriptions only), else None.
    stream_reader: Callable[[str, str], StreamQueue | None] | None = None

    def __post_init__(self) -> None:
        self.broker.queue_listeners.append(self._queue_removed)

    def _queue_removed(self, queue: Queue) -> None:
        if isinstance(queue, StreamQueue):
            self.stream_gone(queue)

    def stream_gone(self, queue: StreamQueue) -> None:
        """``queue`` is no longer the stream here (removed, or its leader or reader moved):
        its publishers and subscribers on every connection are told (metadata update)."""
        for conn in list(self.connections):
            conn.stream_gone(queue)

    def join(self, vhost: str, stream: str, name: str, member: Member, partition: int = -1) -> None:
        """Add ``member`` to its group (``partition``: see the module docstring); it, or
        another, is told what changes."""
        group = self.groups.get((vhost, stream, name))
        if group is None:
            group = self.groups[(vhost, stream, name)] = Group(partition)
        group.members.append(member)
        group.settle()

    def leave(self, vhost: str, stream: str, name: str, member: Member) -> None:
        """``member`` is gone; the group moves to its new choice."""
        key = (vhost, stream, name)
        group = self.groups.get(key)
        if group is None or member not in group.members:
            return
        group.members.remove(member)
        if group.active is member:
            group.active = None
        if group.stepping_down is member:
            group.stepping_down = None
        if not group.members:
            del self.groups[key]
            return
        group.settle()

    def stepped_down(self, vhost: str, stream: str, name: str, member: Member) -> None:
        """``member``'s client answered the step down: the group's choice is activated."""
        group = self.groups.get((vhost, stream, name))
        if group is None or group.stepping_down is not member:
            return
        group.stepping_down = None
        group.settle()

    def is_active(self, vhost: str, stream: str, name: str, member: Member) -> bool:
        group = self.groups.get((vhost, stream, name))
        return group is not None and group.active is member
