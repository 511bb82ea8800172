"""Stand-ins for what a ``Leading`` (cluster/replication.py) reaches: the node's links
to its peers (each records the ops written to it), its lease, the replication that owns
it. Shared by the unit tests of quorum queues' and streams' leaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leveret.model.queues.args import QueueConfig

if TYPE_CHECKING:
    from leveret.protocol.cluster import codec as c


@dataclass
class Peer:
    up: bool = True
    sent: list[c.Op] = field(default_factory=list)

    def write_op(self, op: c.Op) -> None:
        self.sent.append(op)


@dataclass
class Links:
    peers: dict[str, Peer]

    def peer(self, node: str) -> Peer:
        return self.peers[node]


@dataclass
class Membership:
    held: bool = True


@dataclass
class Replication:
    node: str
    links: Links
    membership: Membership


@dataclass
class Queue:
    """What a quorum queue's ``Leading`` reads of its queue: its configuration."""

    config: QueueConfig = field(default_factory=QueueConfig)
