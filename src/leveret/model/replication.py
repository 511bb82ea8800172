"""The rules of a replicated queue's log, pure (no IO, no clock): which offset is committed,
where a returning replica truncates, and the state a follower rebuilds from the log.

A replicated quorum queue (docs/cluster.md, "Replicated queues") has a leader and followers
on other nodes. The leader gives every operation it keeps (enqueue, delivered, settle,
requeue, dead-letter, purge) the next **offset** of the queue's log, stamped with its
**epoch** (the leader's term, counted in etcd); followers write it, sync it and acknowledge
by offset.

- :func:`committed`: the commit rule. An offset is committed once the leader and every
  in-sync follower have it, and only while the in-sync set (the leader counts) is a
  majority of the members. A publisher's confirm waits for its message's offset.
- :class:`EpochLog`: the epochs a log holds, as (epoch, first offset) pairs (Kafka's leader
  epoch cache). A returning replica truncates to the end the leader's log gives its last
  epoch (:meth:`EpochLog.divergence`, KIP-101), never to a high watermark: truncating by
  high watermark lost acknowledged writes in Kafka.
- :func:`successor`: the in-sync member a leader cut off from every follower (but not
  from etcd, so its lease holds and no member elects itself) hands the queue to, as a
  Raft leader on the minority side of a partition steps down.
- :class:`ReplicaState`: what a follower keeps of the queue: every live message by the
  leader's store id, with its delivery count and whether it is out unsettled, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Set

__all__ = ["EpochLog", "ReplicaState", "committed", "least_in_sync", "majority", "successor"]


def majority(members: int) -> int:
    return members // 2 + 1


def committed(
    leader: str,
    leader_end: int,
    acked: Mapping[str, int],
    in_sync: Set[str],
    members: Iterable[str],
    minimum: int | None = None,
) -> int | None:
    """The highest committed offset, or None while nothing may be confirmed (the in-sync
    set, the leader counted, is below ``minimum``: a majority of ``members`` by default).

    ``leader_end`` is the last offset the leader has on disk; ``acked`` the last offset each
    follower acknowledged (synced). Followers outside ``in_sync`` do not hold commits back;
    those in it do, however far behind they are (they leave it through etcd first)."""
    members = set(members)
    voting = (set(in_sync) & members) | {leader}
    if len(voting) < (majority(len(members)) if minimum is None else minimum):
        return None
    low = leader_end
    for node in voting:
        if node != leader:
            low = min(low, acked.get(node, 0))
    return low


def least_in_sync(configured: int | None, members: int) -> int | None:
    """The least in-sync set (the leader counted) ``committed`` asks for: None (a majority)
    unless an operator set ``min-in-sync`` (argument or policy), at most every member."""
    return None if configured is None else max(1, min(configured, members))


def successor(
    leader: str,
    in_sync: Iterable[str],
    members: Iterable[str],
    running: Set[str],
    acked: Mapping[str, int],
    reachable: Set[str],
) -> str | None:
    """The member ``leader`` hands its queue to, or None to keep it.

    Only a leader that hears from none of its followers (``reachable`` empty: none has
    acknowledged what it was sent for a while) hands over, and only to an in-sync member
    whose node is ``running`` (its lease held): an in-sync member has every committed
    offset (each waited for it), so the handover loses nothing confirmed. Of those, the one
    that acknowledged the most. A leader that still hears from a follower keeps the queue:
    the followers it does not hear from leave the in-sync set instead, and those it hears
    from catch up (a member it cannot hear from may be dead with its lease not yet run
    out, and one handed the queue then would hold it until it came back)."""
    if reachable:
        return None
    members = list(members)
    in_sync = set(in_sync)
    candidates = [m for m in members if m != leader and m in in_sync and m in running]
    if not candidates:
        return None
    order = {m: i for i, m in enumerate(members)}
    return max(candidates, key=lambda m: (acked.get(m, -1), -order[m]))


@dataclass
class EpochLog:
    """The epochs of one replica's log: ``starts`` holds (epoch, first offset) in order,
    ``end`` the last offset held (0: empty; offsets start at 1)."""

    starts: list[tuple[int, int]] = field(default_factory=list)
    end: int = 0

    @property
    def epoch(self) -> int:
        return self.starts[-1][0] if self.starts else 0

    def append(self, epoch: int, offset: int) -> None:
        """Hold ``offset`` written in ``epoch``. An older epoch than the log's is refused
        (a deposed leader's write: fencing), as is a gap or an offset written twice."""
        if epoch < self.epoch:
            raise ValueError(f"epoch {epoch} is older than the log's {self.epoch}")
        if offset != self.end + 1:
            raise ValueError(f"offset {offset} does not follow {self.end}")
        if epoch != self.epoch:
            self.starts.append((epoch, offset))
        self.end = offset

    def end_for(self, epoch: int) -> int:
        """The last offset this log holds from ``epoch`` or earlier ones (what the leader
        answers a follower whose last epoch is ``epoch``: KIP-101's end offset for it)."""
        end = 0
        for i, (e, start) in enumerate(self.starts):
            if e > epoch:
                return start - 1
            end = self.starts[i + 1][1] - 1 if i + 1 < len(self.starts) else self.end
        return end

    def divergence(self, leader: EpochLog) -> int:
        """Where this log must be cut to follow ``leader``: the offset past which this log
        and the leader's may differ. Asked per epoch, from this log's last one down: the
        leader's end for an epoch bounds what this log may keep of it."""
        for epoch, start in reversed(self.starts):
            mine = self.end_for(epoch)
            theirs = leader.end_for(epoch)
            if theirs >= start and leader.epoch_at(start) == epoch:
                return min(mine, theirs)
        return 0

    def epoch_at(self, offset: int) -> int:
        """The epoch ``offset`` was written in (0 if this log does not hold it)."""
        if offset < 1 or offset > self.end:
            return 0
        found = 0
        for epoch, start in self.starts:
            if start > offset:
                break
            found = epoch
        return found

    def truncate(self, offset: int) -> None:
        """Keep offsets up to ``offset`` only."""
        if offset >= self.end:
            return
        self.starts = [(e, s) for e, s in self.starts if s <= offset]
        self.end = max(offset, 0)


# What a follower keeps per message: (stored message, delivery count, out unsettled).
Kept = tuple[object, int, bool]


@dataclass
class ReplicaState:
    """A follower's copy of the queue: every live message by the leader's store id, in
    the order they were enqueued (a requeued message keeps its place, as on the leader)."""

    messages: dict[int, list[object]] = field(default_factory=dict)

    def enqueued(self, sid: int, message: object, deliveries: int, out: bool) -> None:
        self.messages[sid] = [message, deliveries, out]

    def delivered(self, sid: int) -> None:
        kept = self.messages.get(sid)
        if kept is not None:
            kept[2] = True

    def requeued(self, sid: int, deliveries: int) -> None:
        kept = self.messages.get(sid)
        if kept is not None:
            kept[1], kept[2] = deliveries, False

    def removed(self, sid: int) -> None:
        self.messages.pop(sid, None)

    def purged(self, sids: Iterable[int]) -> None:
        for sid in sids:
            self.messages.pop(sid, None)

    def reset(self) -> None:
        self.messages.clear()

    def takeover(self) -> list[tuple[object, int, bool]]:
        """What a new leader serves, in order: each message with its delivery count (one
        more for a message that was out unsettled when the old leader went: that delivery
        failed) and whether it goes out redelivered."""
        out: list[tuple[object, int, bool]] = []
        for message, deliveries, unsettled in self.messages.values():
            count = int(deliveries) + (1 if unsettled else 0)  # type: ignore[call-overload]
            out.append((message, count, bool(unsettled) or count > 0))
        return out
