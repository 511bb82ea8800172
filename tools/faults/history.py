"""What one fault run did, as data: every publish with its outcome, every delivery, every
fault. The workload and the nemesis append to a :class:`History`; the checker
(``checker.py``) reads it. Times are seconds since the run started (``time.monotonic``).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Outcome(enum.StrEnum):
    """What a publisher learned of one publish."""

    PENDING = "pending"  # no answer yet (none is left so once the run ends)
    CONFIRMED = "confirmed"  # basic.ack: the broker took responsibility for it
    NACKED = "nacked"  # basic.nack: the broker said it did not take it
    RETURNED = "returned"  # basic.return (mandatory): no queue took it
    # No answer within the confirm timeout, or the connection went first: it may or may
    # not be in the queue (Jepsen's "info" operation).
    INDETERMINATE = "indeterminate"


@dataclass(slots=True)
class Publish:
    """One message a publisher sent. ``id`` is unique in the run; ``seq`` counts the
    publisher's messages across its connections; ``session`` is its connection's number."""

    id: str
    publisher: str
    session: int
    seq: int
    queue: str
    sent: float
    outcome: Outcome = Outcome.PENDING
    settled: float | None = None


@dataclass(slots=True)
class Delivery:
    """One message a consumer received (before it acked it). ``id`` is None for a message
    without the workload's id; ``consumer`` names the consumer and its connection."""

    id: str | None
    queue: str
    consumer: str
    redelivered: bool
    at: float
    publisher: str | None = None
    session: int | None = None
    seq: int | None = None


@dataclass(slots=True)
class Fault:
    """One fault the nemesis injected: ``kind`` (kill, pause, partition, etcd, slowdisk),
    the node it hit (None for etcd), its role for the queues (leader or follower), the
    queues that node led when it was hit, and when it started and was healed."""

    kind: str
    node: str | None
    role: str
    queues: list[str]
    start: float
    healed: float | None = None
    # When the cluster answered as healthy again after the heal (None: not within the bound).
    recovered: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class History:
    """Append-only record of a run (one event loop writes it; no locking)."""

    publishes: dict[str, Publish] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    # Every consumer (its name, without a connection's number) and the queue it reads.
    consumers: dict[str, str] = field(default_factory=dict)

    def sent(self, publish: Publish) -> None:
        assert publish.id not in self.publishes, f"message id {publish.id} used twice"
        self.publishes[publish.id] = publish

    def settle(self, message_id: str, outcome: Outcome, at: float) -> None:
        publish = self.publishes[message_id]
        if publish.outcome is Outcome.PENDING:
            publish.outcome = outcome
            publish.settled = at

    def delivered(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)

    def close(self, at: float) -> None:
        """End of the run: a publish still without an answer is indeterminate."""
        for publish in self.publishes.values():
            if publish.outcome is Outcome.PENDING:
                publish.outcome = Outcome.INDETERMINATE
                publish.settled = at

    def to_json(self) -> dict[str, Any]:
        return {
            "publishes": [asdict(p) for p in self.publishes.values()],
            "deliveries": [asdict(d) for d in self.deliveries],
            "faults": [asdict(f) for f in self.faults],
            "consumers": self.consumers,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> History:
        history = cls()
        for p in doc["publishes"]:
            history.publishes[p["id"]] = Publish(**{**p, "outcome": Outcome(p["outcome"])})
        history.deliveries = [Delivery(**d) for d in doc["deliveries"]]
        history.faults = [Fault(**f) for f in doc["faults"]]
        history.consumers = dict(doc.get("consumers", {}))
        return history
