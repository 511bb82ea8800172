"""Replicated quorum queues and streams on a cluster node: the leader's log shipping and
commit rule, the followers' copies, elections (docs/cluster.md, "Replicated queues"; what
differs for a stream, whose log is the stream's own, is ``stream_replication.py``'s).

A quorum queue's record (``QueueRecord``) names its ``members``, its ``leader``, the
leader's ``epoch`` and the ``in_sync`` set. Every node runs one :class:`Replication`:

- **Leading** (:class:`Leading`, this node is the record's leader): the queue's store is a
  :class:`ReplicatingStore`, which after the journal's write gives each kept operation the
  next offset of the queue's log and ships it (``Append``) over the inter-node link to every
  other member's node. Followers acknowledge by offset once synced (``Appended``). The
  queue's confirm gate (``Queue.gate``) holds a publish's confirm until
  ``model/replication.committed`` says its offset is committed: on the leader's disk (the
  journal's commit, which ``Confirms`` waits for anyway) and on every in-sync follower's,
  while the in-sync set is a majority and this node holds its lease. A follower that stays
  behind past ``LAG_BOUND`` is removed from the in-sync set in etcd (a transaction fenced by
  the leader's lease and the record's revision) before anything else is confirmed; one
  that caught up is added back the same way. A follower whose link (re)connects gets the
  whole state (a snapshot at the current offset) and then the log from there.
- **Following** (:class:`Replica`): the follower keeps the queue's live messages
  (``ReplicaState``) and writes every record it takes to a file of its own, synced before
  it acknowledges. An ``Append`` of an older epoch than the record's is refused (a deposed
  leader's write); a gap is not acknowledged (the leader resends the state when the link
  comes back).
- **Serving.** The leader delivers (to consumers, gets) and applies settles only while it
  can prove it holds its lease: the queue (``QuorumQueue.serve_until``) is given the lease's
  ``valid_until`` less :data:`SERVE_MARGIN`, converted to the model's clock, and moved on
  with each answered keepalive (``Membership.on_extended``); the queue compares it with the
  clock of every input, so a process woken from a pause serves nothing before its
  keepalive task has run. A lost lease stops it at once. After a new lease, a queue the
  record still says this node leads serves again only once a fenced rewrite of that record
  succeeded (no member was elected meanwhile: the election changes the record's revision).
- **Elections.** When a leader's node is not running any more (its lease expired: killed,
  paused, cut off), each in-sync member tries a transaction that compares the record's
  revision and its own lease and writes itself leader with the next epoch (the old leader
  out of the in-sync set). The winner serves the queue from its copy: each message in
  order, those that were out unsettled redelivered with their delivery count one higher;
  the other nodes' proxies follow the record.
- **Hand-over.** A leader cut off from every follower but not from etcd keeps its lease,
  so no member elects itself. Once an in-sync follower has not kept up for ``LAG_BOUND``
  while no follower answers at all (none within ``HEARD_WITHIN``), it hands the queue to
  an in-sync member whose node runs
  (``model/replication.successor``), with the next epoch and itself out of the in-sync
  set, in the same fenced transaction an election makes, and stops serving: as a Raft
  leader on the minority side steps down. Cut off from every follower, it takes none of
  them out of the in-sync set (one of them is to take the queue). A leader that still
  hears from a follower keeps the queue and takes those that did not keep up out of the
  in-sync set. Keeping up is Kafka's rule: a follower acknowledged, within ``LAG_BOUND``,
  the log as it stood at one of the leader's checks (``Leading.mark``, every ``TICK``).
  Leaders send a heartbeat (an empty ``Append``) every ``HEARTBEAT_INTERVAL``, so that
  silence is noticed while no operation is shipped.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import struct
import time
from collections import deque
from dataclasses import dataclass, field, replace
from hashlib import sha256
from typing import TYPE_CHECKING, Any, Final, cast

from leveret.cluster.keys import encode
from leveret.cluster.stream_replication import (
    STREAM_APPEND,
    STREAM_COMMIT,
    STREAM_RESET,
    STREAM_TRACK,
    Epochs,
    StreamAppend,
    StreamReplica,
    StreamShipping,
    apply_append,
    decode_append,
    decode_commit,
    decode_reset,
    decode_track,
    encode_commit,
    encode_track,
    held_epochs,
    load_epochs,
    retention,
    save_epochs,
)
from leveret.convert.formats import stored_message
from leveret.errors import AMQPError
from leveret.model.completion import Completion
from leveret.model.queues.args import PLAIN, QueueConfig
from leveret.model.queues.base import EVERY_MESSAGE_STORE, JOURNAL_STORE, type_of
from leveret.model.queues.quorum import QuorumQueue
from leveret.model.queues.stream import StreamQueue
from leveret.model.replication import (
    ReplicaState,
    committed,
    least_in_sync,
    majority,
    successor,
)
from leveret.protocol.cluster import codec as c
from leveret.store.stream_log import FileStreamLog

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from leveret.cluster.apply import Applier, QueueRecord
    from leveret.cluster.link import Links
    from leveret.cluster.membership import Membership
    from leveret.cluster.metadata import MetadataStore
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.queues.stream_log import StreamLog
    from leveret.server.cluster_link.frontend import LinkFrontEnd
    from leveret.store.stream_log import StreamStore

__all__ = ["LAG_BOUND", "Replication"]

log = logging.getLogger("leveret.cluster")

# Seconds a follower may stay behind before the leader takes it out of the in-sync set.
LAG_BOUND: Final = 2.0
# Seconds a leader leads before it may hand its queue over (``_hand_over``): members cut
# off from each other pass it on at most this often.
HAND_OVER_AFTER: Final = 2 * LAG_BOUND
# Bytes past which a follower's file is rewritten as one snapshot of its copy (and past
# four times the size of the last such snapshot).
COMPACT_AT: Final = 64 << 20
# Seconds between the checks (lag, catching up, elections).
TICK: Final = 0.1
# Seconds a leader stops serving before its lease's ``valid_until`` (at most; a tenth of the
# TTL for short leases): room for a loop turn's cached clock and a slow turn.
SERVE_MARGIN: Final = 0.5

# Record kinds.
ENQUEUE: Final = 1
DELIVERED: Final = 2
REMOVED: Final = 3
REQUEUED: Final = 4
PURGED: Final = 5
SNAPSHOT: Final = 6
# Not in the log: a leader's heartbeat, an ``Append`` at its current offset that a follower
# holding that offset (synced) acknowledges at once, so that a leader hears from its
# followers while no operation is shipped.
HEARTBEAT: Final = 7
HEARTBEAT_RECORD: Final = struct.pack(">BQ", HEARTBEAT, 0)
# Seconds between a leader's heartbeats, and within which a follower it hears from
# answered (two of them).
HEARTBEAT_INTERVAL: Final = 0.5
HEARD_WITHIN: Final = 2 * HEARTBEAT_INTERVAL

_HEAD = struct.Struct(">BQ")
_ENTRY = struct.Struct(">QIB")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_FILE_HEAD = struct.Struct(">IQQ")

Stored = tuple[str, str, int, bytes, bytes]


def _stored(message: Message) -> Stored:
    return (
        message.exchange,
        message.routing_key,
        message.format,
        message.raw_properties,
        message.body,
    )


def _pack_message(m: Stored) -> bytes:
    exchange, key = m[0].encode(), m[1].encode()
    return b"".join(
        (
            _U16.pack(len(exchange)),
            exchange,
            _U16.pack(len(key)),
            key,
            bytes((m[2],)),
            _U32.pack(len(m[3])),
            m[3],
            _U32.pack(len(m[4])),
            m[4],
        )
    )


def _unpack_message(data: bytes, pos: int) -> tuple[Stored, int]:
    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise ValueError("truncated replication record")
        part, pos = data[pos : pos + n], pos + n
        return part

    exchange = take(_U16.unpack(take(2))[0]).decode()
    key = take(_U16.unpack(take(2))[0]).decode()
    fmt = take(1)[0]
    raw = take(_U32.unpack(take(4))[0])
    body = take(_U32.unpack(take(4))[0])
    return (exchange, key, fmt, raw, body), pos


def encode_record(
    kind: int, sid: int = 0, deliveries: int = 0, message: Stored | None = None
) -> bytes:
    head = _HEAD.pack(kind, sid)
    if kind == ENQUEUE:
        assert message is not None
        return head + _U32.pack(deliveries) + _pack_message(message)
    if kind == REQUEUED:
        return head + _U32.pack(deliveries)
    return head


def encode_purged(sids: Iterable[int]) -> bytes:
    listed = list(sids)
    return _HEAD.pack(PURGED, len(listed)) + b"".join(struct.pack(">Q", s) for s in listed)


def encode_snapshot(state: ReplicaState) -> bytes:
    parts = [_HEAD.pack(SNAPSHOT, len(state.messages))]
    for sid, (message, deliveries, out) in state.messages.items():
        parts.append(_ENTRY.pack(sid, int(deliveries), bool(out)))  # type: ignore[call-overload]
        parts.append(_pack_message(message))  # type: ignore[arg-type]
    return b"".join(parts)


def apply_record(state: ReplicaState, record: bytes) -> None:
    """Apply one log record to a follower's copy (bad input raises ValueError)."""
    try:
        kind, sid = _HEAD.unpack_from(record, 0)
        pos = _HEAD.size
        if kind == ENQUEUE:
            (deliveries,) = _U32.unpack_from(record, pos)
            message, end = _unpack_message(record, pos + 4)
            if end != len(record):
                raise ValueError("trailing bytes in a replication record")
            state.enqueued(sid, message, deliveries, False)
        elif kind == DELIVERED:
            state.delivered(sid)
        elif kind == REMOVED:
            state.removed(sid)
        elif kind == REQUEUED:
            (deliveries,) = _U32.unpack_from(record, pos)
            state.requeued(sid, deliveries)
        elif kind == PURGED:
            state.purged(struct.unpack_from(f">{sid}Q", record, pos))
        elif kind == HEARTBEAT:
            pass  # never shipped as a record; harmless if it were
        elif kind == SNAPSHOT:
            state.reset()
            for _ in range(sid):
                entry_sid, deliveries, out = _ENTRY.unpack_from(record, pos)
                message, pos = _unpack_message(record, pos + _ENTRY.size)
                state.enqueued(entry_sid, message, deliveries, bool(out))
        else:
            raise ValueError(f"unknown record kind {kind}")
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed replication record: {exc}") from None


class ReplicatingStore:
    """A replicated queue's store on its leader: the journal's writes, then each kept
    operation appended to the queue's log and shipped (see the module docstring)."""

    def __init__(self, leading: Leading) -> None:
        self.leading = leading
        # Set while a new leader takes over its copy: (delivery count, redelivered) of the
        # message being enqueued.
        self.restoring: tuple[int, bool] | None = None

    def enqueued(self, queue: Queue, entry: QueuedMessage) -> None:
        EVERY_MESSAGE_STORE.enqueued(queue, entry)
        restoring = self.restoring
        if restoring is not None:
            entry.deliveries, entry.redelivered = restoring
            if restoring[0]:
                entry.message = entry.message.replace(
                    headers={**(entry.message.headers or {}), "x-delivery-count": restoring[0]}
                )
        if entry.sid:
            message = _stored(entry.message)
            self.leading.ship(encode_record(ENQUEUE, entry.sid, entry.deliveries, message))
            self.leading.mirror.enqueued(entry.sid, message, entry.deliveries, False)

    def delivered(self, queue: Queue, entry: QueuedMessage) -> None:
        JOURNAL_STORE.delivered(queue, entry)
        if entry.sid:
            self.leading.ship(encode_record(DELIVERED, entry.sid))
            self.leading.mirror.delivered(entry.sid)

    def removed(self, queue: Queue, entry: QueuedMessage) -> None:
        JOURNAL_STORE.removed(queue, entry)
        if entry.sid:
            self.leading.ship(encode_record(REMOVED, entry.sid))
            self.leading.mirror.removed(entry.sid)

    def requeued(self, queue: Queue, entry: QueuedMessage) -> None:
        JOURNAL_STORE.requeued(queue, entry)
        if not entry.sid:
            return
        mirror = self.leading.mirror
        if entry.sid in mirror.messages:
            self.leading.ship(encode_record(REQUEUED, entry.sid, entry.deliveries))
            mirror.requeued(entry.sid, entry.deliveries)
        else:
            # Out to a consumer when the queue became replicated (an operator's
            # add_member): the copies never had it; now they do.
            message = _stored(entry.message)
            self.leading.ship(encode_record(ENQUEUE, entry.sid, entry.deliveries, message))
            mirror.enqueued(entry.sid, message, entry.deliveries, False)

    def dead_lettered(self, queue: Queue, entry: QueuedMessage, reason: str) -> None:
        JOURNAL_STORE.dead_lettered(queue, entry, reason)
        if entry.sid:
            self.leading.ship(encode_record(REMOVED, entry.sid))
            self.leading.mirror.removed(entry.sid)

    def purged(self, queue: Queue, sids: Iterable[int]) -> None:
        sids = list(sids)
        JOURNAL_STORE.purged(queue, sids)
        if sids:
            self.leading.ship(encode_purged(sids))
            self.leading.mirror.purged(sids)


@dataclass
class Leading:
    """A replicated queue this node leads."""

    replication: Replication
    record: QueueRecord
    queue: Queue
    offset: int = 0
    mirror: ReplicaState = field(default_factory=ReplicaState)
    acked: dict[str, int] = field(default_factory=dict)
    # Followers that were sent the state and follow the log from it.
    following: set[str] = field(default_factory=set)
    waits: deque[tuple[int, Completion[bool]]] = field(default_factory=deque)
    # When each follower last acknowledged the log as it was at a check (``mark``, set by
    # each check): a follower that did not for ``LAG_BOUND`` is behind.
    caught_up: dict[str, float] = field(default_factory=dict)
    mark: int = 0
    # When each follower last acknowledged anything (time.monotonic), and when this node
    # began to lead (a hand-over waits a while, so that partitioned members do not pass
    # the queue back and forth).
    heard: dict[str, float] = field(default_factory=dict)
    led_since: float = field(default_factory=time.monotonic)
    beat: float = 0.0  # the last heartbeat (time.monotonic)
    # When the state was last sent to each follower, and how many times in a row it was
    # sent again to a follower that acknowledged none.
    sent_at: dict[str, float] = field(default_factory=dict)
    resent: dict[str, int] = field(default_factory=dict)
    busy: bool = False  # an etcd write about the in-sync set is under way
    # Led under this node's current lease: False from a lost lease until a fenced rewrite
    # of the record under the new one (nothing is served or confirmed meanwhile).
    fenced: bool = True
    # A replicated stream's shipping (``stream_replication.py``); None: a quorum queue.
    stream: StreamShipping | None = None

    @property
    def ident(self) -> tuple[str, str]:
        return (self.record.vhost, self.record.name)

    def followers(self) -> list[str]:
        return [m for m in self.record.members if m != self.replication.node]

    def ship(self, record: bytes) -> None:
        self.offset += 1
        op = c.Append(self.record.vhost, self.record.name, self.record.epoch, self.offset, record)
        for node in self.followers():
            if node in self.following:
                peer = self.replication.links.peer(node)
                if peer.up:
                    peer.write_op(op)
                else:
                    self.following.discard(node)

    def tapped(self, append: StreamAppend) -> None:
        """A replicated stream's log stored an append (``FileStreamLog.tap``): ship it to
        each follower that has everything before it (the others catch up, ``pump``)."""
        stream = self.stream
        assert stream is not None
        start = append.start
        record = stream.tapped(append)
        end = self.offset = append.end
        op = c.Append(self.record.vhost, self.record.name, self.record.epoch, end, record)
        cursor = stream.cursor
        for node in self.followers():
            if node in self.following and cursor.get(node) == start:
                peer = self.replication.links.peer(node)
                if peer.up:
                    peer.write_op(op)
                    cursor[node] = end
                else:
                    self.following.discard(node)

    def tracked(self, reference: str, offset: int) -> None:
        """A replicated stream's log stored a consumer offset (``FileStreamLog.tracked``):
        each follower sent its reset keeps it too (a later reset carries it anyway)."""
        record = self.record
        op = c.Append(
            record.vhost, record.name, record.epoch, self.offset, encode_track(reference, offset)
        )
        for node in self.followers():
            if node in self.following:
                peer = self.replication.links.peer(node)
                if peer.up:
                    peer.write_op(op)

    def tell(self, data: bytes) -> None:
        """Send a record that is not in the log to each follower that follows it."""
        record = self.record
        op = c.Append(record.vhost, record.name, record.epoch, self.offset, data)
        cursor = self.stream.cursor if self.stream is not None else {}
        for node in self.followers():
            if node in self.following and node in cursor:
                peer = self.replication.links.peer(node)
                if peer.up:
                    peer.write_op(op)

    def pump(self) -> None:
        """Send the followers of a replicated stream that are behind its log the next
        appends (``StreamShipping.pump``)."""
        stream = self.stream
        if stream is None:
            return
        record = self.record
        for node in self.followers():
            if node not in self.following or stream.cursor.get(node, -1) >= stream.log.next_offset:
                continue
            peer = self.replication.links.peer(node)
            if not peer.up:
                self.following.discard(node)
                continue
            if stream.cursor.get(node, math.inf) < stream.log.first_offset:
                self.sync(node)  # retention dropped what it lacks: it starts again
                continue
            try:
                shipped = stream.pump(node)
            except Exception:  # a damaged chunk: logged, the follower stays behind
                log.exception("stream '%s' in '%s': catching up '%s'", record.name,
                              record.vhost, node)  # fmt: skip
                continue
            for end, data in shipped:
                peer.write_op(c.Append(record.vhost, record.name, record.epoch, end, data))

    def behind(self, node: str, now: float) -> bool:
        """Whether ``node`` has not kept up with the log for ``LAG_BOUND``."""
        return now - self.caught_up.get(node, self.led_since) > LAG_BOUND

    def heartbeat(self) -> None:
        """An ``Append`` of nothing at the current offset to each follower that follows
        the log: those that hold it answer (``Replication.append``)."""
        record = self.record
        op = c.Append(record.vhost, record.name, record.epoch, self.offset, HEARTBEAT_RECORD)
        for node in self.followers():
            if node in self.following:
                peer = self.replication.links.peer(node)
                if peer.up:
                    peer.write_op(op)

    def sync(self, node: str) -> None:
        """Send ``node`` the whole state at the current offset; it follows from there."""
        peer = self.replication.links.peer(node)
        if not peer.up:
            return
        record = self.record
        if self.stream is not None:
            # A stream's follower answers where its copy ends (``Replication.positioned``).
            data = self.stream.reset(node)
            offset = self.stream.log.first_offset
        else:
            data, offset = encode_snapshot(self.mirror), self.offset
        peer.write_op(c.Append(record.vhost, record.name, record.epoch, offset, data))
        self.following.add(node)
        self.sent_at.pop(node, None)  # (the next check's clock: when it was sent)
        # In sync only once it acknowledged this state (or later): never on an old answer.
        self.acked.pop(node, None)

    def gate(self) -> Completion[bool] | None:
        """The confirm gate (``Queue.gate``): what was just enqueued, once committed."""
        if not self.fenced or not self.replication.membership.held:
            return Completion.of(False)
        if self.committed() >= self.offset:
            return None
        if self.waits and self.waits[-1][0] == self.offset:
            return self.waits[-1][1]
        done: Completion[bool] = Completion()
        self.waits.append((self.offset, done))
        return done

    def committed(self) -> int:
        record = self.record
        if not self.fenced or not self.replication.membership.held:
            return -1
        # A stream's leader counts what its own log synced (a quorum queue's journal
        # commit is waited for by the confirm anyway).
        end = self.offset if self.stream is None else self.stream.log.committed_offset
        upto = committed(
            self.replication.node,
            end,
            self.acked,
            set(record.in_sync),
            record.members,
            least_in_sync(self.queue.config.min_in_sync, len(record.members)),
        )
        return -1 if upto is None else upto

    def advance(self) -> None:
        upto = self.committed()
        if self.stream is not None and upto >= 0 and isinstance(self.queue, StreamQueue):
            self.queue.capped(upto)  # its readers get what is committed
            if upto > self.stream.told:
                self.stream.told = upto
                self.tell(encode_commit(upto))  # and the followers' readers
        waits = self.waits
        while waits and waits[0][0] <= upto:
            waits.popleft()[1].resolve(True)

    def fail(self) -> None:
        waits, self.waits = self.waits, deque()
        for _offset, done in waits:
            done.resolve(False)


@dataclass
class Replica:
    """This node's copy of a replicated queue it follows."""

    path: Path
    epoch: int = 0
    offset: int = 0
    state: ReplicaState = field(default_factory=ReplicaState)
    file: Any = None
    dirty: bool = False
    electing: bool = False
    # The size of the file's last compaction (a snapshot of the copy).
    compacted: int = 0
    # Whom to acknowledge once synced.
    ackers: set[LinkFrontEnd] = field(default_factory=set)

    def open(self) -> None:
        if self.file is None:
            self.file = open(self.path, "ab")  # noqa: SIM115 (kept open while following)

    def write(self, epoch: int, offset: int, record: bytes, *, truncate: bool) -> None:
        if truncate:
            if self.file is not None:
                self.file.close()
            self.file = open(self.path, "wb")  # noqa: SIM115
        else:
            self.open()
        self.file.write(_FILE_HEAD.pack(len(record), epoch, offset) + record)
        self.dirty = True

    def compact(self) -> None:
        """Rewrite the file as one snapshot of the copy at its offset (synced, then renamed
        over the old one), so that it does not grow while the queue's contents do not."""
        record = encode_snapshot(self.state)
        data = _FILE_HEAD.pack(len(record), self.epoch, self.offset) + record
        temporary = self.path.with_suffix(".compact")
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fdatasync(out.fileno())
        if self.file is not None:
            self.file.close()
        os.replace(temporary, self.path)
        self.file = open(self.path, "ab")  # noqa: SIM115
        self.compacted = len(data)

    def load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        pos = 0
        while pos + _FILE_HEAD.size <= len(data):
            size, epoch, offset = _FILE_HEAD.unpack_from(data, pos)
            end = pos + _FILE_HEAD.size + size
            if end > len(data):
                break  # a torn last write: it was never acknowledged
            try:
                apply_record(self.state, data[pos + _FILE_HEAD.size : end])
            except ValueError:
                break
            self.epoch, self.offset = epoch, offset
            pos = end

    def close(self, *, remove: bool = False) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if remove:
            self.path.unlink(missing_ok=True)


class Replication:
    """This node's part in replicated queues; see the module docstring."""

    def __init__(
        self,
        node: str,
        applier: Applier,
        store: MetadataStore,
        membership: Membership,
        links: Links,
        directory: Path,
    ) -> None:
        self.node = node
        self.applier = applier
        self.store = store
        self.membership = membership
        self.links = links
        self.directory = directory
        self.leading: dict[tuple[str, str], Leading] = {}
        self.replicas: dict[tuple[str, str], Replica | StreamReplica] = {}
        self._sync_scheduled = False
        self._acks_scheduled = False
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[Any]] = set()
        membership.on_lost.append(self._lease_lost)
        membership.on_extended.append(self._lease_extended)

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in list(self._writes):
            task.cancel()
        for replica in self.replicas.values():
            replica.close()

    # -- records ------------------------------------------------------------------------------

    def on_record(self, ident: tuple[str, str], record: QueueRecord | None) -> None:
        """The applier's hook: a queue record applied (None: removed)."""
        if (
            record is not None
            and not record.replicated
            and record.leader == self.node
            and ident in self.replicas
            and ident not in self.leading
        ):
            # Handed this queue as its one member left (its leader removed from a queue
            # of two, cluster/members.py): take it over from the copy, as an elected
            # leader does, then keep it in the journal alone (below).
            self._lead(ident, record)
        if record is None or not record.replicated or self.node not in record.members:
            leading = self.leading.pop(ident, None)
            if leading is not None:
                if record is not None and record.leader == self.node:
                    # Shrunk to this node alone (cluster/members.py): its journal holds
                    # the queue, what waited is committed there.
                    self._unreplicate(leading)
                else:
                    self._deposed(leading)
            replica = self.replicas.pop(ident, None)
            if isinstance(replica, StreamReplica):
                self._reader_gone(replica)
            if replica is not None:
                replica.close(remove=True)
            return
        if record.leader == self.node:
            self._lead(ident, record)
            return
        leading = self.leading.pop(ident, None)
        deposed: Path | None = None
        if leading is not None:
            log.warning("queue '%s' in '%s': no longer led here", record.name, record.vhost)
            deposed = self._deposed(leading)
        replica = self.replicas.get(ident)
        if replica is None:
            if _is_stream(record):
                copy = self._stream_replica(ident, record)
                copy.load(avoid=deposed)
                replica = self.replicas[ident] = copy
            else:
                replica = self.replicas[ident] = Replica(self._path(ident))
                replica.load()
        replica.epoch = max(replica.epoch, record.epoch)

    def _deposed(self, leading: Leading) -> Path | None:
        """No longer the leader (another member elected, or this node removed): what
        waits for a commit is refused; a stream's log is no longer shipped, and its
        stream-protocol publishers here are told it moved (metadata_update, as RabbitMQ
        tells them), so their clients find the new leader. The log's path (a stream's)."""
        leading.fail()
        path = None
        stream_log = leading.stream.log if leading.stream is not None else None
        if isinstance(stream_log, FileStreamLog):
            path, stream_log.tap, stream_log.tracked = stream_log.path, None, None
        if isinstance(leading.queue, StreamQueue):
            self.links.server.stream_server.stream_gone(leading.queue)
        return path

    def _unreplicate(self, leading: Leading) -> None:
        queue = leading.queue
        if leading.stream is not None and isinstance(queue, StreamQueue):
            if isinstance(leading.stream.log, FileStreamLog):
                leading.stream.log.tap = None
                leading.stream.log.tracked = None
            queue.readable_upto = None
            queue.dispatch()
        else:
            queue.store = EVERY_MESSAGE_STORE  # a quorum queue's own (model/queues/quorum.py)
        queue.gate = None
        if isinstance(queue, QuorumQueue):
            queue.serve(math.inf)
        waits, leading.waits = leading.waits, deque()
        for _offset, done in waits:
            done.resolve(True)
        log.info("queue '%s' in '%s': one member left, not replicated", *reversed(leading.ident))

    def prune(self) -> int:
        """Remove the copies of queues this node is no longer a member of (removed while
        it was down: ``delete_member``, ``shrink``); run once the records are loaded. How
        many went."""
        kept = {r.path for r in self.replicas.values() if isinstance(r, Replica)}
        gone = 0
        for path in self.directory.glob("*.log"):
            if path not in kept:
                path.unlink(missing_ok=True)
                gone += 1
        # A stream's copies: those of streams this node follows or leads stay.
        streams = {
            self._stream_base(ident).name
            for ident, record in self.applier.view.queues.items()
            if record.replicated and self.node in record.members and _is_stream(record)
        }
        directory = self.directory / "streams"
        if directory.is_dir():
            for path in directory.iterdir():
                if path.name.rpartition(".")[0] not in streams:
                    shutil.rmtree(path, ignore_errors=True)
                    gone += 1
        return gone

    def status(self, ident: tuple[str, str]) -> dict[str, dict[str, Any]]:
        """What this node knows of a replicated queue's members' logs (``quorum_status``):
        the leader's node knows every member's acknowledged offset and the committed one,
        a follower's node its own copy's offset."""
        leading = self.leading.get(ident)
        if leading is not None:
            committed = leading.committed()
            known: dict[str, dict[str, Any]] = {
                self.node: {"log_offset": leading.offset, "committed_offset": committed}
            }
            for node in leading.followers():
                known[node] = {
                    "log_offset": leading.acked.get(node, 0) if node in leading.following else 0,
                    "committed_offset": committed,
                }
            return known
        replica = self.replicas.get(ident)
        if replica is not None:
            return {self.node: {"log_offset": replica.offset, "epoch": replica.epoch}}
        return {}

    def _path(self, ident: tuple[str, str]) -> Path:
        digest = sha256(encode(list(ident))).hexdigest()[:32]
        return self.directory / f"{digest}.log"

    def _stream_base(self, ident: tuple[str, str]) -> Path:
        """Where a stream's copies are: ``<base>.<generation>`` directories."""
        digest = sha256(encode(list(ident))).hexdigest()[:32]
        return self.directory / "streams" / digest

    def reader(self, vhost: str, name: str) -> StreamQueue | None:
        """Stream ``name`` of ``vhost`` as this node reads it from its copy (a member
        that does not lead it: the stream protocol's subscriptions on a replica), capped
        at the leader's commit offset; None when this node holds no copy of it."""
        replica = self.replicas.get((vhost, name))
        record = self.applier.view.queues.get((vhost, name))
        if not isinstance(replica, StreamReplica) or record is None:
            return None
        host = self.links.server.broker.vhosts.get(vhost)
        return replica.read(vhost, record.arguments, host.timers if host is not None else None)

    def _reader_gone(self, replica: StreamReplica) -> None:
        """The copy is no longer read here (taken over, or this node is no longer a
        member): its subscribers are told, as of a deleted stream, and locate it again."""
        reader, replica.reader = replica.reader, None
        if reader is not None:
            reader.deleted = True
            self.links.server.stream_server.stream_gone(reader)

    def _stream_replica(self, ident: tuple[str, str], record: QueueRecord) -> StreamReplica:
        return StreamReplica(
            self._stream_base(ident),
            self._streams(),
            record.name,
            self._stream_config(record).segment_bytes or 0,
        )

    def _stream_config(self, record: QueueRecord) -> QueueConfig:
        """A stream's config on this node (its arguments, this node's policies)."""
        host = self.links.server.broker.vhosts.get(record.vhost)
        try:
            if host is not None:
                return host.configured(
                    record.name, record.arguments, record.durable, record.exclusive,
                    record.auto_delete,
                )  # fmt: skip
            return type_of(record.arguments, queue=record.name, vhost=record.vhost).parse(
                record.arguments, queue=record.name, vhost=record.vhost, durable=record.durable,
                exclusive=record.exclusive, auto_delete=record.auto_delete,
            )  # fmt: skip
        except AMQPError:
            return PLAIN  # the leader accepted them; its rules may be newer than ours

    def _streams(self) -> StreamStore:
        streams = self.links.server.streams
        if streams is None:
            raise RuntimeError("a replicated stream needs the node's data directory")
        return streams

    def _lead(self, ident: tuple[str, str], record: QueueRecord) -> None:
        leading = self.leading.get(ident)
        if leading is not None:
            leading.record = record
            leading.advance()
            return
        vhost = self.links.server.broker.vhosts.get(record.vhost)
        queue = vhost.queues.get(record.name) if vhost is not None else None
        if queue is None:
            return
        if isinstance(queue, StreamQueue):
            self._lead_stream(ident, record, queue)
            return
        leading = self.leading[ident] = Leading(self, record, queue, fenced=self.membership.held)
        store = ReplicatingStore(leading)
        replica = self.replicas.pop(ident, None)
        if isinstance(replica, StreamReplica):
            replica.close()
            replica = None
        if replica is not None:
            taken = replica.state.takeover()
            log.info(
                "queue '%s' in '%s': leading it (epoch %d) with %d messages from this node's copy",
                record.name,
                record.vhost,
                record.epoch,
                len(taken),
            )
            # What the old leader held: its journal entries go as the new leader keeps them.
            for stored, count, redelivered in taken:
                exchange, key, fmt, raw, body = cast("Stored", stored)
                store.restoring = (count, redelivered)
                queue.store = store
                queue.enqueue(stored_message(exchange, key, raw, body, fmt))
            store.restoring = None
            replica.close(remove=True)
        else:
            # This node's journal held the queue (it led it before): the mirror is its
            # current content.
            self._mirror_queue(leading, queue)
        queue.store = store
        queue.gate = leading.gate
        for node in leading.followers():
            leading.sync(node)
        self._serve(leading)

    def _lead_stream(self, ident: tuple[str, str], record: QueueRecord, queue: StreamQueue) -> None:
        """Lead a replicated stream: the log is this node's copy when it was a follower
        (elected, or a restart after that: epoch above 1), the stream's own log when it
        declared it (epoch 1); each append is shipped (``Leading.tapped``)."""
        replica = self.replicas.pop(ident, None)
        stream_log: FileStreamLog | StreamLog
        queue.readable_upto = 0  # (until the first commit under this epoch)
        if isinstance(replica, StreamReplica):
            self._reader_gone(replica)
            stream_log = replica.fresh()
            replica.log = None  # the queue's now
            log.info(
                "queue '%s' in '%s': leading it (epoch %d) from offset %d of this node's copy",
                record.name,
                record.vhost,
                record.epoch,
                stream_log.next_offset,
            )
            queue.adopt(stream_log)
        elif record.epoch > 1:
            copy = self._stream_replica(ident, record)
            copy.load()
            stream_log = copy.fresh()
            queue.adopt(stream_log)
        else:
            stream_log = queue.log
        # The log's epochs: this one starts at its next offset.
        epochs: Epochs = []
        if isinstance(stream_log, FileStreamLog):
            epochs = held_epochs(load_epochs(stream_log.path)[0], stream_log.next_offset)
            if not epochs:
                epochs = [(record.epoch, stream_log.first_offset)]
            if epochs[-1][0] != record.epoch:
                epochs.append((record.epoch, stream_log.next_offset))
            save_epochs(stream_log.path, epochs)
        leading = self.leading[ident] = Leading(
            self,
            record,
            queue,
            fenced=self.membership.held,
            stream=StreamShipping(stream_log, epochs),
            offset=stream_log.next_offset,
        )
        if isinstance(stream_log, FileStreamLog):
            stream_log.tap = leading.tapped
            stream_log.tracked = leading.tracked
        queue_committed = stream_log.on_committed

        def synced() -> None:
            leading.advance()
            if queue_committed is not None:
                queue_committed()

        stream_log.on_committed = synced
        queue.readable_upto = max(leading.committed(), 0)
        queue.gate = leading.gate
        for node in leading.followers():
            leading.sync(node)

    @staticmethod
    def _mirror_queue(leading: Leading, queue: Queue) -> None:
        for entry in _entries(queue):
            if entry.sid:
                leading.mirror.enqueued(entry.sid, _stored(entry.message), entry.deliveries, False)

    # -- the link -----------------------------------------------------------------------------

    def peer_up(self, node: str) -> None:
        """The link to ``node`` is up: the queues led here that it follows get the state."""
        for leading in self.leading.values():
            if node in leading.record.members:
                leading.sync(node)

    def appended(self, node: str, op: c.Appended) -> None:
        leading = self.leading.get((op.vhost, op.queue))
        if leading is None or op.epoch != leading.record.epoch:
            return
        if leading.stream is not None and node not in leading.stream.cursor:
            return  # a stream's follower that has not answered its reset yet
        if op.offset >= leading.acked.get(node, 0):
            leading.acked[node] = op.offset
            leading.resent.pop(node, None)
        now = time.monotonic()
        leading.heard[node] = now
        if op.offset >= leading.mark:
            leading.caught_up[node] = now
        leading.advance()

    def positioned(self, node: str, op: c.Positioned) -> None:
        """A stream's follower answered a reset: its copy (on disk) ends at ``op.offset``;
        it is sent what follows."""
        leading = self.leading.get((op.vhost, op.queue))
        if leading is None or leading.stream is None or op.epoch != leading.record.epoch:
            return
        taken = leading.stream.positioned(node, op.sync, op.offset)
        if taken is None:
            return
        if not taken:
            leading.sync(node)
            return
        leading.acked[node] = op.offset
        now = time.monotonic()
        leading.heard[node] = now
        if op.offset >= leading.mark:
            leading.caught_up[node] = now
        leading.pump()
        leading.advance()

    def append(self, front: LinkFrontEnd, op: c.Append) -> None:
        """A leader's ``Append`` reached this node (the link's front end)."""
        ident = (op.vhost, op.queue)
        replica = self.replicas.get(ident)
        if replica is None or op.epoch < replica.epoch:
            return  # not a member, or a deposed leader's write
        if isinstance(replica, StreamReplica):
            self._append_stream(front, op, replica)
            return
        if op.record == HEARTBEAT_RECORD:
            if op.epoch == replica.epoch and op.offset == replica.offset and not replica.dirty:
                front.send(c.Appended(op.vhost, op.queue, op.epoch, op.offset))
            return  # (behind, or not synced yet: the next sync answers)
        snapshot = bool(op.record) and op.record[0] == SNAPSHOT
        if not snapshot and op.offset != replica.offset + 1:
            return  # a gap: the leader sends the state again when the link returns
        try:
            apply_record(replica.state, op.record)
        except ValueError as exc:
            log.warning("queue '%s' in '%s': %s", op.queue, op.vhost, exc)
            return
        replica.write(op.epoch, op.offset, op.record, truncate=snapshot)
        replica.epoch, replica.offset = op.epoch, op.offset
        replica.ackers.add(front)
        if not self._sync_scheduled:
            self._sync_scheduled = True
            asyncio.get_running_loop().call_soon(self._sync)

    def _append_stream(self, front: LinkFrontEnd, op: c.Append, replica: StreamReplica) -> None:
        """A stream's leader's ``Append`` (``stream_replication.py``): a reset or an
        append to this node's copy, acknowledged once the copy is synced."""
        if op.record == HEARTBEAT_RECORD:
            if op.epoch == replica.epoch and op.offset == replica.offset == replica.synced:
                front.send(c.Appended(op.vhost, op.queue, op.epoch, op.offset))
            return
        kind = op.record[0] if op.record else 0
        try:
            if kind == STREAM_COMMIT:
                if op.epoch == replica.epoch:
                    replica.commit(decode_commit(op.record))
                return
            if kind == STREAM_TRACK:
                if op.epoch == replica.epoch and replica.log is not None:
                    replica.log.store_offset(*decode_track(op.record))
                return
            if kind == STREAM_RESET:
                reset = decode_reset(op.record)
                replica.follow(reset)
                replica.positions.append((front, reset.sync))
            elif kind == STREAM_APPEND:
                copy = replica.log
                closed = None if copy is None else apply_append(copy, decode_append(op.record))
                if closed is None:
                    return  # a gap: the leader resets the copy when the link returns
                record = self.applier.view.queues.get((op.vhost, op.queue))
                if closed and copy is not None and record is not None:
                    copy.retain(*retention(self._stream_config(record), time.time()))
            else:
                raise ValueError(f"unknown stream record kind {kind}")
        except (ValueError, OSError) as exc:
            log.warning("stream '%s' in '%s': %s", op.queue, op.vhost, exc)
            return
        replica.epoch = op.epoch
        if kind == STREAM_APPEND:
            replica.ackers.add(front)
        if not self._acks_scheduled:
            self._acks_scheduled = True
            asyncio.get_running_loop().call_soon(self._stream_acks)

    def _stream_acks(self) -> None:
        """Acknowledge what the streams' copies hold once it is synced (one store sync for
        every copy written in this loop turn)."""
        self._acks_scheduled = False
        due: list[tuple[str, str, StreamReplica, FileStreamLog, int, int, set[LinkFrontEnd]]]
        due = []
        positions: list[tuple[str, str, StreamReplica, FileStreamLog, int, int, Any]] = []
        for (vhost, name), replica in self.replicas.items():
            if not isinstance(replica, StreamReplica) or replica.log is None:
                continue
            copy, epoch, offset = replica.log, replica.epoch, replica.offset
            if replica.positions:
                positions.append((vhost, name, replica, copy, epoch, offset, replica.positions))
                replica.positions = []
            if replica.ackers:
                fronts, replica.ackers = replica.ackers, set()
                due.append((vhost, name, replica, copy, epoch, offset, fronts))
        if not due and not positions:
            return

        def synced() -> None:
            # Answers to resets first: the leader learns where the copy is.
            for vhost, name, replica, copy, epoch, offset, answers in positions:
                if replica.log is copy:
                    replica.synced = max(replica.synced, offset)
                    for front, sync in answers:
                        front.send(c.Positioned(vhost, name, epoch, sync, offset))
            for vhost, name, replica, copy, epoch, offset, fronts in due:
                if replica.log is not copy:
                    continue  # reset or taken over meanwhile
                replica.synced = max(replica.synced, offset)
                ack = c.Appended(vhost, name, epoch, offset)
                for front in fronts:
                    front.send(ack)

        self._streams().after_sync(synced)

    def _sync(self) -> None:
        """Sync every copy written since the last call, then acknowledge (one fsync per
        copy per loop turn)."""
        self._sync_scheduled = False
        for (vhost, name), replica in self.replicas.items():
            if not isinstance(replica, Replica) or not replica.dirty or replica.file is None:
                continue
            replica.file.flush()
            os.fdatasync(replica.file.fileno())
            replica.dirty = False
            if replica.file.tell() > COMPACT_AT and replica.file.tell() > 4 * replica.compacted:
                replica.compact()
            ack = c.Appended(vhost, name, replica.epoch, replica.offset)
            for front in replica.ackers:
                front.send(ack)
            replica.ackers.clear()

    # -- the lease, lag and elections ---------------------------------------------------------

    def _serve(self, leading: Leading) -> None:
        """Give the queue the instant until which it may deliver (the module docstring,
        "Serving"), in the model's clock: the loop's (uvloop's is a cached
        ``CLOCK_MONOTONIC``, behind ``time.monotonic`` by up to a turn, which only moves
        the instant earlier)."""
        queue = leading.queue
        if not isinstance(queue, QuorumQueue):
            return
        membership = self.membership
        valid_until = membership.valid_until
        now = asyncio.get_running_loop().time()
        until = -math.inf
        if leading.fenced and valid_until:
            margin = min(SERVE_MARGIN, membership.ttl / 10)
            until = valid_until - time.monotonic() + now - margin
        timers = queue.timers
        timers.now = max(timers.now, now)
        queue.serve(until)

    def _lease_lost(self) -> None:
        for leading in self.leading.values():
            leading.fenced = False
            leading.fail()
            self._serve(leading)

    def _lease_extended(self, _valid_until: float) -> None:
        for leading in self.leading.values():
            self._serve(leading)

    async def _fence(self, leading: Leading) -> None:
        """Under a new lease, lead on only if the record is still the one this node led
        (a fenced rewrite of it: an election meanwhile changed its revision)."""
        leading.busy = True
        try:
            done = await self.store.replace_queue_record(leading.record, leading.record)
        finally:
            leading.busy = False
        if done and self.leading.get(leading.ident) is leading and self.membership.held:
            leading.fenced = True
            log.info(
                "queue '%s' in '%s': still led here under the new lease",
                leading.record.name,
                leading.record.vhost,
            )
            self._serve(leading)
            leading.advance()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                self._check(time.monotonic())
            except Exception:
                log.exception("replication check failed")

    def _check(self, now: float) -> None:
        if not self.membership.held:
            return
        for leading in list(self.leading.values()):
            if leading.fenced:
                self._check_followers(leading, now)
                leading.advance()  # (a policy may have changed the minimum)
            elif not leading.busy:
                self._spawn(self._fence(leading))
        running = self.applier.view.nodes
        for ident, replica in list(self.replicas.items()):
            record = self.applier.view.queues.get(ident)
            if (
                record is not None
                and record.leader not in running
                and self.node in record.in_sync
                and record.leader != self.node
                and (not isinstance(replica, StreamReplica) or replica.electable)
            ):
                self._spawn(self._elect(ident, record, replica))

    def _check_followers(self, leading: Leading, now: float) -> None:
        record = leading.record
        if now - leading.beat >= HEARTBEAT_INTERVAL:
            leading.beat = now
            leading.heartbeat()
        leading.pump()
        # What a follower must acknowledge from now on to count as keeping up: the log
        # as it is at this check (Kafka's "caught up to the log end within the bound").
        leading.mark = leading.offset
        if leading.busy:
            return
        lagging: list[str] = []
        for node in leading.followers():
            if node not in leading.following:
                leading.sync(node)
            if node not in leading.following:
                if node in record.in_sync and leading.behind(node, now):
                    lagging.append(node)
                continue
            if (
                leading.acked.get(node, -1) >= leading.offset
                and now - leading.heard.get(node, leading.led_since) <= LAG_BOUND
            ):
                # Holding the offset and answering (its heartbeats, while nothing is
                # shipped): a follower silent that long is not kept up with, idle or not.
                leading.caught_up[node] = now
                if node not in record.in_sync:
                    self._spawn(self._in_sync(leading, node, True))
                continue
            if node in record.in_sync and leading.behind(node, now):
                lagging.append(node)
            elif node in leading.following and node not in leading.acked:
                # Nothing acknowledged since the state was sent: it reached a node that did
                # not know yet it is a member (an operator's add_member applied there after
                # here) and was dropped. Send it again, waiting twice as long each time (a
                # large state may just be slow to sync).
                resent = leading.resent.get(node, 0)
                if now - leading.sent_at.setdefault(node, now) > LAG_BOUND * 2**resent:
                    leading.resent[node] = min(resent + 1, 5)
                    leading.sync(node)
                    leading.sent_at[node] = now
        if not lagging:
            return
        reachable = self._reachable(leading, now)
        if not reachable:
            running = self.applier.view.nodes
            down = [node for node in lagging if node not in running]
            least = least_in_sync(leading.queue.config.min_in_sync, len(record.members))
            if down and least is not None and least < majority(len(record.members)):
                # An operator lowered the minimum (docs/cluster.md): followers whose nodes
                # are down (no lease, so none of them can be elected) leave the in-sync set
                # and the leader confirms with fewer, as Kafka's min.insync.replicas allows.
                for node in down:
                    self._spawn(self._in_sync(leading, node, False))
                return
            # Cut off from every follower: the in-sync set stays as it is (each of its
            # members holds every commit, and one of them takes the queue, now or once this
            # node has led long enough not to pass it back and forth).
            if now - leading.led_since > HAND_OVER_AFTER:
                heir = successor(
                    self.node,
                    record.in_sync,
                    record.members,
                    set(self.applier.view.nodes),
                    leading.acked,
                    reachable,
                )
                if heir is not None:
                    self._spawn(self._hand_over(leading, heir))
            return
        for node in lagging:
            self._spawn(self._in_sync(leading, node, False))

    @staticmethod
    def _reachable(leading: Leading, now: float) -> set[str]:
        """The followers this leader hears from: those that acknowledged something (an
        operation or a heartbeat) within ``HEARD_WITHIN``, two heartbeats."""
        return {
            node
            for node in leading.followers()
            if now - leading.heard.get(node, -math.inf) <= HEARD_WITHIN
        }

    async def _hand_over(self, leading: Leading, heir: str) -> None:
        """Cut off from every follower but not from etcd (so no member elects itself while
        this node's lease holds), hand the queue to ``heir``, an in-sync member whose node
        runs, with the next epoch and this node out of the in-sync set: as an election
        does, fenced the same way. This node stops serving at once; its copy goes and its
        clients' consumers follow the queue when the record is applied here."""
        record = leading.record
        in_sync = tuple(m for m in record.in_sync if m != self.node)
        new = replace(record, leader=heir, epoch=record.epoch + 1, in_sync=in_sync)
        leading.busy = True
        try:
            done = await self.store.replace_queue_record(new, record)
        finally:
            leading.busy = False
        if not done:
            return
        log.warning(
            "queue '%s' in '%s': handed to node '%s' (epoch %d): no follower answers",
            record.name,
            record.vhost,
            heir,
            new.epoch,
        )
        leading.fenced = False
        leading.fail()
        self._serve(leading)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _in_sync(self, leading: Leading, node: str, add: bool) -> None:
        """Take ``node`` out of the in-sync set (it stayed behind) or put it back (it
        caught up): a transaction fenced by this node's lease and the record's revision."""
        record = leading.record
        members = set(record.in_sync)
        members = members | {node} if add else members - {node}
        in_sync = tuple(m for m in record.members if m in members)
        leading.busy = True
        try:
            done = await self.store.replace_queue_record(replace(record, in_sync=in_sync), record)
        finally:
            leading.busy = False
        if done:
            log.info(
                "queue '%s' in '%s': node '%s' %s the in-sync set",
                record.name,
                record.vhost,
                node,
                "back in" if add else "out of",
            )
        leading.advance()

    async def _elect(
        self, ident: tuple[str, str], record: QueueRecord, replica: Replica | StreamReplica
    ) -> None:
        if replica.electing:
            return
        replica.electing = True
        try:
            in_sync = tuple(m for m in record.in_sync if m != record.leader)
            new = replace(record, leader=self.node, epoch=record.epoch + 1, in_sync=in_sync)
            if await self.store.replace_queue_record(new, record):
                log.info(
                    "queue '%s' in '%s': elected leader (epoch %d), node '%s' is down",
                    record.name,
                    record.vhost,
                    new.epoch,
                    record.leader,
                )
        finally:
            replica.electing = False


def _is_stream(record: QueueRecord) -> bool:
    return record.arguments.get("x-queue-type") in ("stream", b"stream")


def _entries(queue: Queue) -> list[QueuedMessage]:
    """The entries a queue holds now, ready ones in order (a leader's own restart)."""
    return queue.ready_entries()
