"""What every stream-protocol connection of a broker shares: the listener's settings, the
open connections (a deleted stream's publishers are told on every connection), and the
single-active-consumer groups.

Single active consumer (RabbitMQ 3.11's, for streams): subscriptions with the properties
``single-active-consumer=true`` and ``name=<group>`` on one stream form a group; the first
one is active, the rest wait. The active one is told with a ``consumer_update`` (active)
and answers with where to start; only then is it attached to the stream. When it goes
(unsubscribed, connection closed, stream deleted) the next one, in subscription order,
becomes active the same way. Imported by the stream-protocol connection and the listener.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker


class Member(Protocol):
    """A subscription as its group sees it."""

    def activate(self) -> None:
        """It became the active one: tell the client, attach once it answers."""
        ...


@dataclass
class StreamSettings:
    """What the stream listener offers and advertises."""

    frame_max: int = 1048576  # RabbitMQ's stream default (1 MiB)
    heartbeat: int = 60
    host: str = "localhost"  # the broker's address in metadata responses
    port: int = 5552


@dataclass
class StreamServer:
    """The broker-wide state of the stream protocol; see the module docstring."""

    broker: Broker
    users: UserStore
    settings: StreamSettings = field(default_factory=StreamSettings)
    connections: set[object] = field(default_factory=set)
    groups: dict[tuple[str, str, str], list[Member]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def join(self, vhost: str, stream: str, name: str, member: Member) -> bool:
        """Add ``member`` to its group; True when it is the active one (it is then told)."""
        group = self.groups[(vhost, stream, name)]
        group.append(member)
        if len(group) == 1:
            member.activate()
            return True
        return False

    def leave(self, vhost: str, stream: str, name: str, member: Member) -> None:
        """``member`` is gone; if it was the active one, the next one becomes active."""
        key = (vhost, stream, name)
        group = self.groups.get(key)
        if not group or member not in group:
            return
        was_active = group[0] is member
        group.remove(member)
        if not group:
            del self.groups[key]
        elif was_active:
            group[0].activate()

    def is_active(self, vhost: str, stream: str, name: str, member: Member) -> bool:
        group = self.groups.get((vhost, stream, name))
        return group is not None and bool(group) and group[0] is member
