"""The verdict on one run's history, as Jepsen's ``total-queue`` checker gives it and a
little more (issue 25, "Safety, measured as Jepsen measures it"):

- **lost**: confirmed, never delivered. Must be empty.
- **unexpected**: delivered, but never published (no id, an unknown id, or delivered from
  another queue than the one it was published to). Must be empty.
- **duplicated**: delivered more than once (counted, allowed: at-least-once delivery).
  For a stream, a message one reader got more than once: a stream-protocol reader that
  resumes after the offset it stored on the server (``store_offset`` every N messages)
  gets again what it had read after that store. Within one consumer connection a second
  delivery is an order violation (below), so only a resumption may repeat a message.
- **recovered**: indeterminate (no confirm within the timeout, connection lost) and delivered;
  **unconfirmed delivered**: nacked or returned, and delivered all the same (reported).
- **order**: for each consumer connection, the messages of one publisher connection that
  were not redelivered arrive in the order they were published. Must hold.
- **empty**: every queue holds no message once everything was drained. Must hold.
- **failover**: for each fault that hit a queue's leader, the time from the fault to the
  first confirm of a message to that queue published after it (the new leader's first),
  and the time until every publisher of the queue had one (the slowest client's).

Pure: a history and the queues' depths in, a :class:`Verdict` out.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tools.faults.history import Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tools.faults.history import Fault, History

# Faults that end a leader's service: their failover figure is "the leader's death".
LEADER_DEATHS = frozenset({"kill"})


@dataclass(frozen=True, slots=True)
class OrderViolation:
    consumer: str
    publisher: str
    session: int
    before: int  # the sequence number delivered first
    after: int  # a smaller (or equal) one delivered after it


@dataclass(slots=True)
class Failover:
    kind: str
    node: str | None
    queue: str
    start: float
    # Seconds from the fault to the first confirm of a message published after it; None
    # when no such confirm came before the run ended.
    first_confirm: float | None
    # The same for each publisher of the queue that published after the fault: the
    # slowest one (a client that lost its node, failed over, and waited for the queue).
    every_publisher: float | None = None


@dataclass(slots=True)
class Window:
    """What the publishers of the queues a fault hit (every queue, for a fault that hit
    none) saw of the messages they sent while it lasted."""

    kind: str
    node: str | None
    role: str
    sent: int
    confirmed: int
    nacked: int
    indeterminate: int
    # Seconds from publish to confirm: the median and the slowest.
    latency_median: float | None
    latency_worst: float | None


@dataclass
class Verdict:
    counts: dict[str, int]
    lost: list[str]
    unexpected: list[str]
    duplicated: dict[str, int]
    recovered: list[str]
    unconfirmed_delivered: list[str]
    order_violations: list[OrderViolation]
    depths: dict[str, int | None]
    per_queue: dict[str, dict[str, int]]
    failovers: list[Failover] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    # A stream's readers, each on its own (deliveries, messages, duplicate deliveries,
    # confirmed messages it never got): which reader lost what.
    per_reader: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return all(depth == 0 for depth in self.depths.values())

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unexpected or self.order_violations) and self.empty

    def failover_summary(self, kinds: frozenset[str] = LEADER_DEATHS) -> dict[str, Any]:
        """Median and worst failover time of the faults of ``kinds`` on a leader."""
        chosen = [f for f in self.failovers if f.kind in kinds]
        times = sorted(f.first_confirm for f in chosen if f.first_confirm is not None)
        every = sorted(f.every_publisher for f in chosen if f.every_publisher is not None)
        return {
            "faults": len(chosen),
            "measured": len(times),
            "never": len(chosen) - len(times),
            "median": statistics.median(times) if times else None,
            "worst": times[-1] if times else None,
            "all": times,
            # Until every publisher had a confirm again (those that lost their node too).
            "every_publisher_median": statistics.median(every) if every else None,
            "every_publisher_worst": every[-1] if every else None,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "empty": self.empty,
            "counts": self.counts,
            "lost": self.lost,
            "unexpected": self.unexpected,
            "duplicated": self.duplicated,
            "recovered": self.recovered,
            "unconfirmed_delivered": self.unconfirmed_delivered,
            "order_violations": [asdict(v) for v in self.order_violations],
            "depths": self.depths,
            "per_queue": self.per_queue,
            "failovers": [asdict(f) for f in self.failovers],
            "windows": [asdict(w) for w in self.windows],
            "per_reader": self.per_reader,
            "failover_after_leader_kill": self.failover_summary(),
            "failover_by_kind": {
                kind: self.failover_summary(frozenset({kind}))
                for kind in sorted({f.kind for f in self.failovers})
            },
        }


def check(
    history: History, depths: Mapping[str, int | None], *, every_consumer: bool = False
) -> Verdict:
    """The verdict on ``history``; ``depths`` are the messages left in each queue after the
    drain (None: the queue could not be read, which fails the run as a non-empty one).

    ``every_consumer`` is for a stream, which each consumer reads whole: a confirmed
    message is lost unless *every* consumer of its queue got it, and a duplicate is a
    message one consumer got twice (a consumer is its name without its connection's
    number: ``c2`` of ``c2.3``)."""
    publishes = history.publishes
    times_delivered: Counter[str] = Counter()
    per_consumer: Counter[tuple[str, str]] = Counter()
    unexpected: list[str] = []
    for n, delivery in enumerate(history.deliveries):
        if delivery.id is None:
            unexpected.append(f"<no id #{n} in {delivery.queue}>")
            continue
        publish = publishes.get(delivery.id)
        if publish is None or publish.queue != delivery.queue:
            unexpected.append(delivery.id)
            continue
        times_delivered[delivery.id] += 1
        per_consumer[(_consumer(delivery.consumer), delivery.id)] += 1

    outcomes: dict[Outcome, list[str]] = defaultdict(list)
    for publish in publishes.values():
        outcomes[publish.outcome].append(publish.id)
    delivered = set(times_delivered)
    if every_consumer:
        readers: dict[str, set[str]] = defaultdict(set)
        for name, queue in history.consumers.items():
            readers[queue].add(name)
        lost = [
            i
            for i in outcomes[Outcome.CONFIRMED]
            if i not in delivered
            or any((c, i) not in per_consumer for c in readers[publishes[i].queue])
        ]
        # A duplicate is a message one consumer got more than once.
        duplicated: dict[str, int] = {}
        for (_, i), n in per_consumer.items():
            if n > 1:
                duplicated[i] = max(n, duplicated.get(i, 0))
        extra = sum(n - 1 for n in per_consumer.values())
        per_reader = _per_reader(history, per_consumer, outcomes[Outcome.CONFIRMED])
    else:
        per_reader = {}
        lost = [i for i in outcomes[Outcome.CONFIRMED] if i not in delivered]
        duplicated = {i: n for i, n in times_delivered.items() if n > 1}
        extra = sum(n - 1 for n in duplicated.values())
    recovered = [i for i in outcomes[Outcome.INDETERMINATE] if i in delivered]
    unconfirmed = [
        i for i in outcomes[Outcome.NACKED] + outcomes[Outcome.RETURNED] if i in delivered
    ]

    counts = {
        "attempted": len(publishes),
        **{o.value: len(outcomes[o]) for o in Outcome if o is not Outcome.PENDING},
        "deliveries": len(history.deliveries),
        "delivered": len(delivered),
        "lost": len(lost),
        "unexpected": len(unexpected),
        "duplicated": len(duplicated),
        "duplicate_deliveries": extra,
        "recovered": len(recovered),
        "unconfirmed_delivered": len(unconfirmed),
    }
    return Verdict(
        counts=counts,
        lost=sorted(lost, key=_id_order),
        unexpected=unexpected,
        duplicated=duplicated,
        recovered=sorted(recovered, key=_id_order),
        unconfirmed_delivered=sorted(unconfirmed, key=_id_order),
        order_violations=_order_violations(history),
        depths=dict(depths),
        per_queue=_per_queue(history, set(lost), delivered),
        failovers=failovers(history),
        windows=windows(history),
        per_reader=per_reader,
    )


def _per_reader(
    history: History, per_consumer: Counter[tuple[str, str]], confirmed: list[str]
) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = {name: Counter() for name in history.consumers}
    for (name, _), n in per_consumer.items():
        row = table.setdefault(name, Counter())
        row["deliveries"] += n
        row["messages"] += 1
        row["duplicate_deliveries"] += n - 1
    for name, queue in history.consumers.items():
        table[name]["lost"] = sum(
            1
            for i in confirmed
            if history.publishes[i].queue == queue and (name, i) not in per_consumer
        )
    return {name: dict(row) for name, row in sorted(table.items())}


def _consumer(name: str) -> str:
    return name.rpartition(".")[0] or name


def _id_order(message_id: str) -> tuple[str, ...]:
    return tuple(part.zfill(12) for part in message_id.split("."))


def _order_violations(history: History) -> list[OrderViolation]:
    # Per consumer connection, the last sequence number seen of each publisher connection.
    last: dict[tuple[str, str, int], int] = {}
    violations: list[OrderViolation] = []
    for delivery in history.deliveries:
        if delivery.redelivered or delivery.id is None:
            continue
        publish = history.publishes.get(delivery.id)
        if publish is None or publish.queue != delivery.queue:
            continue
        key = (delivery.consumer, publish.publisher, publish.session)
        previous = last.get(key)
        if previous is not None and publish.seq <= previous:
            violations.append(
                OrderViolation(
                    delivery.consumer, publish.publisher, publish.session, previous, publish.seq
                )
            )
        last[key] = publish.seq if previous is None else max(previous, publish.seq)
    return violations


def _per_queue(history: History, lost: set[str], delivered: set[str]) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for publish in history.publishes.values():
        row = table[publish.queue]
        row["attempted"] += 1
        row[publish.outcome.value] += 1
        row["lost"] += publish.id in lost
        row["delivered"] += publish.id in delivered
    return {queue: dict(row) for queue, row in sorted(table.items())}


def failovers(history: History) -> list[Failover]:
    """For each fault that hit a queue's leader: seconds to the first confirm of a message
    to that queue published at or after the fault (so a confirm the old leader had sent
    before it died, still on its way, does not count)."""
    confirms: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for publish in history.publishes.values():
        if publish.outcome is Outcome.CONFIRMED and publish.settled is not None:
            confirms[publish.queue][publish.publisher].append((publish.sent, publish.settled))
    result = []
    for fault in history.faults:
        if fault.role != "leader":
            continue
        for queue in fault.queues:
            each = [_first(fault, c) for c in confirms[queue].values()]
            firsts = [f for f in each if f is not None]
            result.append(
                Failover(
                    fault.kind,
                    fault.node,
                    queue,
                    fault.start,
                    min(firsts) if firsts else None,
                    max(firsts) if firsts else None,
                )
            )
    return result


def _first(fault: Fault, confirms: list[tuple[float, float]]) -> float | None:
    after = [settled for sent, settled in confirms if sent >= fault.start]
    return min(after) - fault.start if after else None


def windows(history: History) -> list[Window]:
    """For each fault, the publishes sent between its start and its heal."""
    result = []
    for fault in history.faults:
        end = fault.healed if fault.healed is not None else float("inf")
        queues = set(fault.queues) or {p.queue for p in history.publishes.values()}
        sent = [
            p
            for p in history.publishes.values()
            if p.queue in queues and fault.start <= p.sent <= end
        ]
        latencies = sorted(
            p.settled - p.sent
            for p in sent
            if p.outcome is Outcome.CONFIRMED and p.settled is not None
        )
        outcomes = Counter(p.outcome for p in sent)
        result.append(
            Window(
                fault.kind,
                fault.node,
                fault.role,
                len(sent),
                outcomes[Outcome.CONFIRMED],
                outcomes[Outcome.NACKED] + outcomes[Outcome.RETURNED],
                outcomes[Outcome.INDETERMINATE],
                statistics.median(latencies) if latencies else None,
                latencies[-1] if latencies else None,
            )
        )
    return result
