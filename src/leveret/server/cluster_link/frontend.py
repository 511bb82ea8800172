"""The inter-node link's front end: another node of the cluster as a client of this node's
core, for the queues this node leads.

A peer node (its dialer, ``cluster/link.py``) connects to ``cluster_port`` and, once the
handshake proved it knows the cluster's secret, asks what a client of one node asks:
publish into a queue (routing happened on the peer; a confirm once this node has done what
it does before confirming: the store's commit for a persistent message in a durable queue,
through the same ``Confirms`` a channel uses), consume with credit, get, settle (accept,
reject, requeue), cancel. Each operation goes through the queue-type interface, so every
type a node leads serves the link as it serves a local channel.

Driven by the connection's ``Shell`` like any front end (turns, output pacing, the memory
alarm's blocking, internal errors). When the link goes, its consumers go and every
delivery it left unsettled is requeued, as when a client's connection closes.

A publish into a queue the peer was told falls behind (``Backlog``) is accounted for
(``Taken``, which lets the peer's publishers send more) only as messages leave that queue,
so the peer's publishers go at its consumers' pace and the backlog stays near the queue's
pace, instead of growing past its paging threshold while the link's window lets them go at
the leader's enqueue rate. A queue whose consumers take nothing for ``STUCK`` seconds is
not paced by them (one node does not stop a publisher for a consumer that stopped either)
until one takes again.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import stored_message
from leveret.errors import AMQPError
from leveret.model.confirms import Confirms
from leveret.model.consumer import Browser, Consumer, ConsumerOwner, Source
from leveret.model.dead_letter import REJECTED
from leveret.model.message import HINT_SHARED
from leveret.model.queues.stream import StreamQueue
from leveret.protocol.cluster import codec as c
from leveret.protocol.cluster.codec import Also, Cancel, Consume, Credit, Settle

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.broker import Broker
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.shell.info import ChannelInfo
    from leveret.server.shell.shell import Shell

__all__ = ["LinkFrontEnd", "LinkIdentity", "agreement"]

log = logging.getLogger("leveret.cluster")

PROTOCOL: Final = "leveret cluster link"
# Operations handled per turn, and per paced turn.
TURN_OPS: Final = 500
PACED_TURN_OPS: Final = 50
# Bytes of output past which deliveries to the peer pause (the transport's own buffer
# pauses them too, through the shell).
OUTPUT_HIGH_WATER: Final = 1 << 20
# Seconds without a message leaving a queue that falls behind after which the publishes
# into it are accounted for at once again (its consumers stopped taking: pacing the peer's
# publishers by them would stop those); and how often, while publishes wait to be
# accounted for, the queues are looked at when no input brings a turn (consumers on this
# node, or on a third node, take from the queue without a turn of this link).
STUCK: Final = 0.2
LOOK: Final = 0.005
# What the peer's consumers send (consume, credit, settle, cancel) is handled ahead of its
# publishes still waiting for a turn: with up to a window of publishes read at once (the
# peer's ``PUBLISH_WINDOW``), its consumers' credit would otherwise wait for their turns.
# Gets and inspections stay in order with the publishes (a get sees what was published
# before it, as on one node). ``receive`` sorts them by type.

# What the memory alarm holds (an Also is the last Publish's message into another queue).
_PUBLISHES: Final = (c.Publish, c.Also)
# Deliver routes kept (``LinkFrontEnd.routes``), all forgotten past it.
ROUTES_KEPT: Final = 256
# Seconds between log lines about peers that dial this plain port with TLS (each redials
# every second while the configurations differ), and when the last was written.
TLS_REFUSAL_QUIET: Final = 60.0
_tls_refused_at: list[float] = []
# Entries a browsing consumer reads from its queue at a time (0-10's ``BROWSE_BATCH``).
BROWSE_BATCH: Final = 256


def _controls(op: c.Op) -> bool:
    """``op`` is one of the peer's consumers' (``receive`` handles them first)."""
    kind = type(op)
    return kind is Credit or kind is Settle or kind is Consume or kind is Cancel


def agreement(agreed: frozenset[str]) -> str:
    """A link's features, for its log line ("features: also, taken; not: deliver-also")."""
    spoken = ", ".join(sorted(agreed)) or "none"
    missing = ", ".join(sorted(c.FEATURES - agreed))
    return f"features: {spoken}" + (f"; not: {missing}" if missing else "")


@dataclass
class _Paced:
    """Publishes into one queue that falls behind, handled but not yet accounted for."""

    # Their weights, oldest first; the queue's depth at the last look and what this link
    # added to it since; when a message last left it (or it started falling behind).
    weights: deque[int]
    depth: int
    added: int
    since: float
    # Its consumers took nothing for ``STUCK``: publishes are accounted for at once.
    stuck: bool = False


@dataclass
class LinkIdentity:
    """What the listening node knows: its name, the cluster's secret, its incarnation, and
    the live link of each peer (a peer's newer incarnation replaces an older one's link)."""

    node: str
    secret: str
    incarnation: int
    links: dict[str, LinkFrontEnd] = field(default_factory=dict)
    # Told when a peer's link is up or gone (the node's log; tests).
    on_peer: Callable[[str, bool], None] | None = None
    # Where a replicated queue's leader's ``Append`` goes (``cluster/replication.py``).
    replicas: ReplicaSink | None = None
    # The link features this node announces (``codec.FEATURES``; fewer for a test).
    features: frozenset[str] = c.FEATURES


class _Browsing(Browser):
    """A peer's browsing consumer (its ``Consume`` said ``codec.BROWSE``: an AMQP 0-10
    not-acquired subscription on its node): one of the queue's ``browsers``, woken when
    messages become ready; it sends copies of the ready entries it has not seen, within
    its consumer's credit, as deliveries that need no settlement (its consumer settles
    automatically), each named by its position in the queue (``codec.BROWSED``) for the
    peer's ``Acquire``. Nothing is taken: the messages stay for the queue's consumers."""

    def __init__(self, front: LinkFrontEnd, queue: Queue, consumer: Consumer) -> None:
        self.front = front
        self.queue = queue
        self.consumer = consumer
        # The sequence number of the last entry sent; ``browse`` is not re-entered.
        self.upto = 0
        self.busy = False

    def browse(self) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            queue, consumer = self.queue, self.consumer
            while not queue.deleted and consumer.credit > 0:
                batch = queue.browse_after(self.upto, min(consumer.credit, BROWSE_BATCH))
                if not batch:
                    return
                for entry in batch:
                    # Its credit, and the link's output (``writable_changed``).
                    if not consumer.can_take(entry.message):
                        return
                    self.upto = entry.seq
                    self.front._copy(consumer, entry)
        finally:
            self.busy = False


class ReplicaSink(Protocol):
    """A follower's side of replicated queues: takes a leader's ``Append``; acknowledges
    through the front end's :meth:`LinkFrontEnd.send` once synced."""

    def append(self, front: LinkFrontEnd, op: c.Append) -> None: ...


class _LinkOwner(ConsumerOwner):
    """The owner of the peer's consumers: their deliveries are written to the link. A
    ``CallbackOwner`` called the front end's bound method through Python's call protocol
    (its arguments boxed and parsed again) once a delivery; this calls it directly."""

    def __init__(self, front: LinkFrontEnd) -> None:
        self.front = front
        # False while the connection's output is paused: deliveries wait in the queue.
        self.writable = True

    def accepts(self, consumer: Consumer, size: int) -> bool:
        return self.writable

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        self.front._deliver(consumer, entry)

    def consumer_removed(self, consumer: Consumer) -> None:
        self.front._removed(consumer)

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
        return None  # the peer's consumers have no settlement deadline here


class LinkFrontEnd:
    """One peer node's link into this node's core; see the module docstring."""

    protocol = PROTOCOL
    turn_budget = TURN_OPS
    paced_turn_budget = PACED_TURN_OPS
    output_high_water = OUTPUT_HIGH_WATER
    # The memory alarm holds the peer's publishes, not the link: the peer's consumers'
    # credit and acks are what lets this node drain below its watermark.
    reads_when_blocked = True

    def __init__(self, shell: Shell, identity: LinkIdentity) -> None:
        self.shell = shell
        self.broker: Broker = shell.broker
        # The broker's vhosts (a dict it keeps for good): one attribute read less a publish.
        self.vhosts = self.broker.vhosts
        # The last vhost a publish named, and its queues (``_queue``).
        self.last_vhost: VirtualHost | None = None
        self.last_queues: dict[str, Queue] = {}
        self.identity = identity
        self.reader = c.Reader()
        self.ops: deque[c.Op] = deque()
        self.control: deque[c.Op] = deque()
        self.should_close_transport = False
        self.close_reason = ""
        self.nonce = os.urandom(c.NONCE_SIZE)
        # What this side's Hello asks the peer to prove (``codec.challenge``).
        self.challenge = b""
        self.peer: c.Hello | None = None
        # The link features both sides speak, known from the peer's Hello: ``takes``, it
        # is told what was taken (``Taken``); ``delivers_also``, a ``DeliverAlso`` may go;
        # ``keeps``, a ``Deliver`` may ask the peer to keep its message (``DeliverKept``).
        self.agreed: frozenset[str] = frozenset()
        self.takes = False
        self.delivers_also = False
        self.keeps = False
        self.proven = False
        self.confirms = Confirms(self.broker, self)
        self.owner = _LinkOwner(self)
        self.consumers: dict[int, Consumer] = {}
        self.ids: dict[Consumer, int] = {}
        self.sent: dict[int, int] = {}
        # The peer's browsing consumers (in their queues' ``browsers``, not consumers).
        self.browsing: dict[Consumer, _Browsing] = {}
        # Deliveries the peer has not settled: id -> (queue, entry).
        self.unsettled: dict[int, tuple[Source, QueuedMessage]] = {}
        self.next_did = 1
        # Queues the peer was told are falling behind.
        self.behind: set[Queue] = set()
        self.writable = True
        self.output = shell.output
        # The publishes' flow control: the weight (``codec.publish_weight``) of the peer's
        # publishes handled, and how much of it the peer was told (``Taken``).
        self.taken = 0
        self.reported = 0
        # Publishes into queues falling behind, accounted for as messages leave them.
        self.paced: dict[Queue, _Paced] = {}
        self.now = 0.0
        # The memory alarm blocked the link: publishes wait in ``ops`` (the peer's window
        # bounds them, as ``Taken`` does not move), everything else goes on in ``control``.
        self.publishes_held = False
        # The last Publish, and its message once made: an ``Also`` puts it in another queue.
        self.last: c.Publish | None = None
        self.last_message: Message | None = None
        # The message of the last Deliver written: the same to another consumer of the
        # peer goes as a ``DeliverAlso`` (a fanout's deliveries cross once).
        self.last_delivered: Message | None = None
        # The last ``codec.KEPT`` messages written whole with ``keep``, as the peer keeps
        # them, by slot, and the slot of each by the message's id (the list holds the
        # message, so its id is not another's meanwhile): a message delivered again to a
        # consumer of the peer goes as a ``DeliverKept``.
        self.kept: list[Message | None] = [None] * c.KEPT
        self.kept_slots: dict[int, int] = {}
        self.kept_next = 0
        # The size (properties and body) of each slot's message, counted in the broker's
        # memory gauge while the slot holds it: taken off as another takes its slot and,
        # all of them, as the link goes (``connection_lost``).
        self.kept_sizes: list[int] = [0] * c.KEPT
        self.gauge = self.broker.gauge
        # The Deliver frames' routes (``codec.deliver_route``) by routing key, with their
        # exchange: a queue's deliveries mostly repeat them, encoded once here.
        self.routes: dict[str, tuple[str, bytes]] = {}

    # -- FrontEnd --------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        return bool(self.control) or (bool(self.ops) and not self.publishes_held)

    @property
    def held_size(self) -> int:
        return 0

    def receive(self, data: bytes, now: float) -> None:
        if self.should_close_transport:
            return
        if self.peer is None and not self.reader.buffered and data[:2] == b"\x16\x03":
            # A TLS handshake record (a Hello's length never starts with 0x16): read as a
            # frame's length it would be waited for, hundreds of MB, until the peer gave up.
            quiet = bool(_tls_refused_at) and now - _tls_refused_at[0] < TLS_REFUSAL_QUIET
            if not quiet:
                _tls_refused_at[:] = [now]
            self._refuse(
                "it speaks TLS: cluster TLS (cluster_tls_certfile) is on there and not here",
                quiet=quiet,
            )
            return
        try:
            decoded = self.reader.feed(data)
        except c.LinkError as exc:
            self._refuse(f"bad input on the link: {exc.reply_text}")
            return
        if not self.proven:  # the handshake first, everything in order
            self.ops.extend(decoded)
            return
        ops, control = self.ops, self.control
        if self.publishes_held:
            for op in decoded:
                (ops if isinstance(op, _PUBLISHES) else control).append(op)
            return
        # The consumers' operations (above) told by their types, not ``isinstance``
        # against a tuple of them (compiled, a generic call a class: four for each
        # publish), none of these classes being subclassed; and each deque extended once
        # a read, not appended to once an operation (a deque's method is a generic call).
        first = 0
        for op in decoded:
            if _controls(op):
                break
            first += 1
        if first == len(decoded):
            ops.extend(decoded)  # no consumer's operation in this read: the most
            return
        control.extend([op for op in decoded if _controls(op)])
        ops.extend([op for op in decoded if not _controls(op)])

    def run(self, budget: int, now: float) -> None:
        # Taken from the front of deques: a backlog of n operations costs a turn its budget,
        # not a copy of the n left (the list's slices did); the consumers' operations first.
        self.now = now
        control, ops = self.control, self.ops
        while budget > 0 and control and not self.should_close_transport:
            self._handle(control.popleft())
            budget -= 1
        while budget > 0 and ops and not self.publishes_held and not self.should_close_transport:
            self._handle(ops.popleft())
            budget -= 1
        self.confirms.flush()
        self._report(now)

    def _report(self, now: float) -> None:
        if self.paced:
            self._look(now)
        if self.taken != self.reported and self.takes and not self.should_close_transport:
            # Once a turn: the peer lets its publishers send this much more.
            self.reported = self.taken
            self._write(c.Taken(self.taken))

    def _look(self, now: float) -> None:
        """Account for the paced publishes of as many messages as left each queue since
        the last look; all of a queue's once it keeps up again, or stopped taking."""
        paced = self.paced
        for queue, p in list(paced.items()):
            weights = p.weights
            if queue.deleted or not queue.falling_behind():
                self.taken += sum(weights)
                del paced[queue]
                continue
            depth = queue.message_count
            left = p.depth + p.added - depth
            p.depth = depth
            p.added = 0
            if left > 0:
                p.since = now
                p.stuck = False
                while left and weights:
                    self.taken += weights.popleft()
                    left -= 1
            elif weights and now - p.since > STUCK:
                p.stuck = True
                self.taken += sum(weights)
                weights.clear()

    def take_output(self, now: float) -> list[bytes]:
        # The turn's frames joined once: a Deliver is written as pieces (``_send_delivery``),
        # which the transport would otherwise take one buffer each (a ``writev`` entry, a
        # buffer acquired and released). A large body is copied here once, where a frame
        # of its own copied it before.
        frames = self.output.take()
        return [b"".join(frames)] if len(frames) > 1 else frames

    def next_tick(self, now: float) -> float | None:
        if any(p.weights for p in self.paced.values()):
            return now + LOOK
        return None

    def tick(self, now: float) -> None:
        if self.paced and not self.should_close_transport:
            self._report(now)

    def notify_blocked(self, reason: str) -> None:
        # What waits behind the held publishes goes on without them: a get or an
        # inspection then sees what was published before the alarm, as a get on another
        # connection does on one node while a publisher is blocked.
        if not self.proven:  # nothing published yet: only a publish blocks a connection
            return
        self.publishes_held = True
        ops, control = self.ops, self.control
        publishes = [op for op in ops if isinstance(op, _PUBLISHES)]
        if len(publishes) != len(ops):
            control.extend(op for op in ops if not isinstance(op, _PUBLISHES))
            ops.clear()
            ops.extend(publishes)

    def notify_unblocked(self, now: float) -> None:
        self.publishes_held = False

    def writable_changed(self, writable: bool) -> None:
        self.writable = self.owner.writable = writable
        if writable:
            for queue in {consumer.queue for consumer in self.consumers.values()}:
                queue.dispatch()
            for browser in list(self.browsing.values()):
                browser.browse()

    def hold_input(self, channel: int | None) -> bool:
        return False

    def release_input(self, channel: int | None) -> None:
        return None

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        self.should_close_transport = True
        self.close_reason = reply_text

    def internal_error(self, now: float) -> None:
        self.should_close_transport = True
        self.close_reason = "internal error"

    def connection_lost(self) -> None:
        """The peer is gone: its consumers go, what it left unsettled is requeued."""
        self.confirms.closed = True
        self.paced.clear()
        self._forget_kept()
        for consumer in list(self.consumers.values()):
            self._stop(consumer)
        self.consumers.clear()
        self.ids.clear()
        by_queue: dict[Source, list[QueuedMessage]] = {}
        for queue, entry in self.unsettled.values():
            by_queue.setdefault(queue, []).append(entry)
        self.unsettled.clear()
        for queue, entries in by_queue.items():
            if queue.deleted:
                for entry in entries:
                    queue.settle(entry)
            else:
                queue.requeue(entries)
        peer = self.peer
        if peer is not None and self.identity.links.get(peer.node) is self:
            del self.identity.links[peer.node]
            if self.identity.on_peer is not None:
                self.identity.on_peer(peer.node, False)

    def _forget_kept(self) -> None:
        """The link is gone: its kept messages leave the memory gauge (and the ring, which
        the peer's next link starts again)."""
        self.gauge.bytes -= sum(self.kept_sizes)
        self.kept = [None] * c.KEPT
        self.kept_slots.clear()
        self.kept_sizes = [0] * c.KEPT
        self.kept_next = 0
        self.last_delivered = None

    def channel_infos(self) -> list[ChannelInfo]:
        return []

    # -- the handshake ---------------------------------------------------------------------

    def _write(self, op: c.Op) -> None:
        self.output.append(c.encode(op))

    def send(self, op: c.Op) -> None:
        """Write ``op`` to the peer (replication's ``Appended``, outside a turn)."""
        if not self.should_close_transport:
            self._write(op)

    def _refuse(self, reason: str, *, quiet: bool = False) -> None:
        level = logging.DEBUG if quiet else logging.WARNING
        log.log(level, "inter-node link from %s refused: %s", self.shell.peer, reason)
        self.should_close_transport = True
        self.close_reason = reason
        self.ops.clear()
        self.control.clear()

    def _hello(self, op: c.Hello) -> None:
        identity = self.identity
        if self.peer is not None:
            self._refuse("a second hello")
            return
        if op.cluster_tag != c.cluster_tag(identity.secret):
            self._refuse(f"node '{op.node}' belongs to another cluster")
            return
        self.peer = op
        agreed = self.agreed = identity.features & op.speaks
        self.takes = c.TAKEN in agreed
        self.delivers_also = c.DELIVER_ALSO in agreed
        self.keeps = c.DELIVER_KEPT in agreed
        hello = c.Hello(
            identity.node, identity.incarnation, self.nonce, op.cluster_tag, identity.features
        )
        self.challenge = c.challenge(hello)
        self._write(hello)
        self._write(c.Proof(c.proof(identity.secret, "listener", identity.node, c.challenge(op))))

    def _proof(self, op: c.Proof) -> None:
        identity = self.identity
        peer = self.peer
        if peer is None or self.proven:
            self._refuse("a proof out of turn")
            return
        expected = c.proof(identity.secret, "dialer", peer.node, self.challenge)
        if not hmac.compare_digest(op.mac, expected):
            self._refuse(f"node '{peer.node}' could not prove the cluster's secret")
            return
        current = identity.links.get(peer.node)
        if current is not None:
            if current.peer is not None and current.peer.incarnation > peer.incarnation:
                self._refuse(f"node '{peer.node}' has a newer link (incarnation)")
                return
            # A newer incarnation of the peer (it restarted): its old link is over.
            current.should_close_transport = True
            current.close_reason = "replaced by the peer's newer link"
            current.connection_lost()
        self.proven = True
        identity.links[peer.node] = self
        self.shell.opened = True
        info = self.shell.info
        info.user, info.vhost = peer.node, ""
        if self.takes:
            # This node keeps the publishes' account (the peer holds its publishers by it).
            self._write(c.Taken(0))
        log.info("inter-node link from node '%s' is up (%s)", peer.node, agreement(self.agreed))
        if identity.on_peer is not None:
            identity.on_peer(peer.node, True)

    # -- operations ------------------------------------------------------------------------

    def _handle(self, op: c.Op) -> None:
        if not self.proven:
            if isinstance(op, c.Hello):
                self._hello(op)
            elif isinstance(op, c.Proof):
                self._proof(op)
            else:
                self._refuse("an operation before the handshake")
            return
        if isinstance(op, c.Publish):
            self._publish(op)
        elif isinstance(op, c.Also):
            self._also(op)
        elif isinstance(op, c.Settle):
            self._settle(op)
        elif isinstance(op, c.Credit):
            self._credit(op)
        elif isinstance(op, c.Consume):
            self._consume(op)
        elif isinstance(op, c.Cancel):
            self._cancel(op)
        elif isinstance(op, c.Get):
            self._get(op)
        elif isinstance(op, c.Inspect):
            self._inspect(op)
        elif isinstance(op, c.StoreOffset):
            stream = self._queue(op.vhost, op.queue)
            if isinstance(stream, StreamQueue) and not stream.deleted:
                stream.log.store_offset(op.reference, op.offset)
        elif isinstance(op, c.QueryOffset):
            self._query_offset(op)
        elif isinstance(op, c.Stat):
            queue = self._queue(op.vhost, op.queue)
            if queue is None:
                self._write(c.Failed(op.rid, 404, f"no queue '{op.queue}' in vhost '{op.vhost}'"))
            else:
                self._write(
                    c.Stats(op.rid, queue.message_count, queue.unacked_count, queue.consumer_count)
                )
        elif isinstance(op, c.Drain):
            self._drain(op)
        elif isinstance(op, c.Acquire):
            self._acquire(op)
        elif isinstance(op, c.Append):
            if self.identity.replicas is not None:
                self.identity.replicas.append(self, op)
        else:
            self._refuse(f"unexpected {type(op).__name__} from the dialing node")

    def _queue(self, vhost_name: str, name: str) -> Queue | None:
        vhost = self.vhosts.get(vhost_name)
        if vhost is None:
            return None
        if vhost is not self.last_vhost:
            # ``VirtualHost`` is interpreted: its ``queues`` (never another dict) is read
            # once a vhost, not once a publish.
            self.last_vhost = vhost
            self.last_queues = vhost.queues
        return self.last_queues.get(name)

    def _publish(self, op: c.Publish) -> None:
        self.last = op
        self.last_message = None
        ops = self.ops
        if ops and type(ops[0]) is Also:
            # Into several queues here (the peer writes a fanout's Also frames right
            # after its Publish): marked before the first queue delivers it, so that its
            # first Deliver asks the peer to keep it (``_send_delivery``).
            self._message(op).hints |= HINT_SHARED
        self._into(op.seq, op.vhost, op.queue, op)

    def _also(self, op: c.Also) -> None:
        last = self.last
        if last is None:
            self._refuse("an Also before any Publish")
            return
        self._into(op.seq, op.vhost, op.queue, last)
        message = self.last_message
        if message is not None:
            # Its Also came in a later read than its Publish: kept from its next Deliver.
            message.hints |= HINT_SHARED

    def _message(self, op: c.Publish) -> Message:
        """The last Publish's message, made once for every queue it goes to."""
        message = self.last_message
        if message is None:
            # A 0-9-1 message (most) made by the compiled ``wire_message`` directly, not
            # through ``convert/formats.py`` (interpreted).
            message = self.last_message = (
                stored_message(op.exchange, op.routing_key, op.raw, op.body, op.format)
                if op.format
                else wire_message(op.exchange, op.routing_key, op.raw, op.body)
            )
        return message

    def _into(self, seq: int, vhost: str, name: str, publish: c.Publish) -> None:
        """The message of ``publish`` (the last Publish) into ``vhost``'s queue ``name``.
        On both nodes a Publish and an Also weigh the whole message: the window then bounds
        what the leader's queues take in, as before there were Also frames."""
        weight = c.publish_weight(publish.raw, publish.body)
        queue = self._queue(vhost, name)
        confirms = self.confirms
        if seq:
            confirms.seq += 1
            if confirms.seq != seq:
                self._refuse(f"publish {seq} out of order (expected {confirms.seq})")
                return
        if queue is None:
            # Deleted meanwhile (or no longer led here): as a refused publish.
            self.taken += weight
            if seq:
                confirms.published(False, False)
            return
        # The store's writes are watched for a confirm only (``journal.writes`` is a Python
        # property of the store's journal, ``StreamJournal``'s).
        journal = self.broker.journal if seq else None
        writes = journal.writes if journal is not None else 0
        accepted = queue.enqueue(self._message(publish))
        self.shell.published = True
        behind = queue.falling_behind()
        # A set's lookup (the queue's hash) only while a queue is, or was, falling behind.
        was_behind = bool(self.behind) and queue in self.behind
        if behind and was_behind:
            self._pace(queue, weight)
        else:
            self.taken += weight
        if behind != was_behind:
            # The peer paces its publishers into this queue as one node paces its own.
            if behind:
                self.behind.add(queue)
            else:
                self.behind.discard(queue)
            self._write(c.Backlog(vhost, name, behind))
        if journal is not None:
            gate = queue.gate() if accepted and queue.gate is not None else None
            confirms.published(accepted, journal.writes != writes, gate)

    def _pace(self, queue: Queue, weight: int) -> None:
        """A publish into a queue still falling behind: accounted for once a message left
        it (``_look``), unless its consumers stopped taking."""
        p = self.paced.get(queue)
        if p is None:
            p = self.paced[queue] = _Paced(deque(), queue.message_count - 1, 0, self.now)
        p.added += 1
        if p.stuck:
            self.taken += weight
        else:
            p.weights.append(weight)

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        """``Confirms``' sink: the peer's publishes up to ``upto``."""
        if not self.should_close_transport:
            self._write(c.Confirm(upto, multiple, ack))

    def _consume(self, op: c.Consume) -> None:
        queue = self._queue(op.vhost, op.queue)
        if queue is None:
            self._write(c.Cancelled(op.cid, 404, f"no queue '{op.queue}' in vhost '{op.vhost}'"))
            return
        if op.cid in self.consumers:
            self._refuse(f"consumer {op.cid} reused")
            return
        browses = op.arguments.get(c.BROWSE) is True
        try:
            if browses:
                queue.browse_after(0, 0)  # a type that cannot be browsed refuses here
            consumer = queue.consumer(
                f"link:{self.peer.node if self.peer else '?'}:{op.cid}",
                self.owner,
                auto_settle=op.auto_settle or browses,
                exclusive=op.exclusive,
                credit=op.credit,
                priority=op.priority,
                arguments=op.arguments,
            )
            # Refused before ConsumeOk, not after: the peer's client then gets the channel
            # error one node gives (403), not a cancel of a consume it was told is on.
            queue.check_exclusive_use(op.exclusive)
        except AMQPError as exc:
            # A client's bad argument (a stream's x-stream-offset), a queue in exclusive
            # use: its consumer is refused, the link (every other queue's traffic) goes on.
            self._write(c.Cancelled(op.cid, exc.reply_code, exc.reply_text))
            return
        self.consumers[op.cid] = consumer
        self.ids[consumer] = op.cid
        self.sent[op.cid] = 0
        self._write(c.ConsumeOk(op.cid))
        if browses:
            # A browser, as one node's: in the queue's browsers, not its consumers.
            browser = self.browsing[consumer] = _Browsing(self, queue, consumer)
            queue.browsers.append(browser)
            browser.browse()
            return
        try:
            queue.add_consumer(consumer)
        except AMQPError as exc:
            self._forget(op.cid)
            self._write(c.Cancelled(op.cid, exc.reply_code, exc.reply_text))

    def _forget(self, cid: int) -> Consumer | None:
        consumer = self.consumers.pop(cid, None)
        if consumer is not None:
            self.ids.pop(consumer, None)
            self.sent.pop(cid, None)
        return consumer

    def _stop(self, consumer: Consumer) -> None:
        """``consumer`` (forgotten) leaves its queue: as a consumer, or as a browser."""
        browser = self.browsing.pop(consumer, None)
        if browser is None:
            consumer.queue.remove_consumer(consumer)
        elif browser in browser.queue.browsers:
            browser.queue.browsers.remove(browser)

    def _credit(self, op: c.Credit) -> None:
        self._grant(op.cid, op.credit, op.received)

    def _grant(self, cid: int, credit: int, received: int) -> Consumer | None:
        """The peer's consumer ``cid`` may take ``credit`` beyond the first ``received``
        of its deliveries: what it may take now, handed what the queue holds; None when it
        was cancelled meanwhile."""
        consumer = self.consumers.get(cid)
        if consumer is not None:
            consumer.credit = max(0, received + credit - self.sent[cid])
            browser = self.browsing.get(consumer) if self.browsing else None
            if browser is not None:
                browser.browse()
            else:
                consumer.queue.dispatch()
        return consumer

    def _drain(self, op: c.Drain) -> None:
        """The peer's consumer drains: it is given what the queue holds up to its credit
        (``_grant``), then the rest of its credit is given up, and the peer
        is told after those deliveries (one node's drain, ``Source.drain``)."""
        consumer = self._grant(op.cid, op.credit, op.received)
        if consumer is not None:
            consumer.credit = 0
        # Answered for a consumer gone meanwhile too: the peer ignores what it does not wait for.
        self._write(c.Drained(op.cid))

    def _cancel(self, op: c.Cancel) -> None:
        consumer = self._forget(op.cid)
        if consumer is not None:
            self._stop(consumer)

    def _deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        cid = self.ids[consumer]
        did = self.next_did
        self.next_did = did + 1
        if not consumer.auto_settle:
            self.unsettled[did] = (consumer.queue, entry)
        consumer.credit -= 1
        self.sent[cid] += 1
        self._send_delivery(cid, did, entry)

    def _copy(self, consumer: Consumer, entry: QueuedMessage) -> None:
        """A browser's delivery: a copy of ``entry``, which stays in the queue, named by
        its position there (``codec.BROWSED``) rather than a delivery id to settle."""
        cid = self.ids[consumer]
        consumer.credit -= 1
        self.sent[cid] += 1
        self._send_delivery(cid, c.BROWSED | entry.seq, entry)

    def _send_delivery(self, cid: int, did: int, entry: QueuedMessage) -> None:
        """``entry`` to the peer's consumer ``cid`` as delivery ``did``: a ``DeliverAlso``
        when its message is the last one sent whole on this link, a ``DeliverKept`` when
        it is one of the last ``codec.KEPT`` the peer was asked to keep (every delivery,
        a browser's copies too, must go through here)."""
        message = entry.message
        # Counted (``add``, not ``append``): past ``OUTPUT_HIGH_WATER`` the shell stops the
        # deliveries until the turn's output is taken, instead of encoding a deep queue
        # of large messages into memory in one turn.
        if message is self.last_delivered and self.delivers_also:
            self.output.add(c.deliver_also_frame(cid, did, entry.redelivered))
            return
        if self.kept_slots:
            slot = self.kept_slots.get(id(message))
            if slot is not None:
                self.output.add(c.deliver_kept_frame(cid, did, entry.redelivered, slot))
                return
        self.last_delivered = message
        # Kept only where it may be delivered again: a message an Also put in several
        # queues (``HINT_SHARED``); the others cost nothing more (a dict lookup and a slot
        # a delivery cost a one-queue message 0.28 µs at the leader, docs/benchmarks.md).
        keep = False
        if message.hints & HINT_SHARED and self.keeps:
            size = len(message.raw_properties) + len(message.body)
            if size <= c.KEEP_MAX:
                keep = True
                slot = self.kept_next
                old = self.kept[slot]
                if old is not None:
                    del self.kept_slots[id(old)]
                self.kept[slot] = message
                self.kept_slots[id(message)] = slot
                self.kept_next = slot + 1 if slot + 1 < c.KEPT else 0
                sizes = self.kept_sizes
                self.gauge.bytes += size - sizes[slot]
                sizes[slot] = size
        routing_key = message.routing_key
        kept_route = self.routes.get(routing_key)
        if kept_route is None or kept_route[0] != message.exchange:
            kept_route = (message.exchange, c.deliver_route(message.exchange, routing_key))
            if len(self.routes) >= ROUTES_KEPT:
                self.routes.clear()
            self.routes[routing_key] = kept_route
        # As pieces of the turn's one write (``take_output`` joins them), counted as
        # ``add`` counts a frame.
        output = self.output
        output.count(
            c.add_deliver(
                output.frames,
                cid,
                did,
                entry.redelivered | keep << 1,
                kept_route[1],
                message.format,
                message.raw_properties,
                message.body,
            )
        )

    def _acquire(self, op: c.Acquire) -> None:
        """The peer's browser takes a message it was sent, if it is still ready: unsettled,
        answered as a get (one node's message.acquire of a browsed message)."""
        queue = self._queue(op.vhost, op.queue)
        if queue is None:
            self._write(c.Failed(op.rid, 404, f"no queue '{op.queue}' in vhost '{op.vhost}'"))
            return
        try:
            # The entry itself (a priority level finds it by identity), or a paged copy.
            found = queue.browse_after(op.position - 1, 1)
            entry = queue.acquire(found[0]) if found and found[0].seq == op.position else None
        except AMQPError as exc:
            self._write(c.Failed(op.rid, exc.reply_code, exc.reply_text))
            return
        self._got(op.rid, queue, entry, settled=False)

    def _removed(self, consumer: Consumer) -> None:
        """The queue went: the peer's consumer is over."""
        cid = self.ids.get(consumer)
        if cid is not None:
            self._forget(cid)
            self._write(c.Cancelled(cid, 0, "queue deleted"))

    def _settle(self, op: c.Settle) -> None:
        unsettled = self.unsettled
        if op.kind == c.ACCEPT:  # the acks: one loop without the kind read again an id
            for did in op.dids:
                # ``get`` and ``del`` are the compiled dict's own; ``pop`` with a default
                # is a generic method call.
                item = unsettled.get(did)
                if item is not None:  # else settled twice, or requeued: ignored
                    del unsettled[did]
                    item[0].settle(item[1])
            return
        requeue: dict[Source, list[QueuedMessage]] = {}
        for did in op.dids:
            item = unsettled.pop(did, None)
            if item is None:
                continue  # settled twice, or requeued when a consumer went: ignored
            queue, entry = item
            if queue.deleted:
                queue.settle(entry)
            elif op.kind == c.REJECT:
                queue.discard(entry, REJECTED)
            else:
                requeue.setdefault(queue, []).append(entry)
        for queue, entries in requeue.items():
            queue.requeue(entries)

    def _get(self, op: c.Get) -> None:
        queue = self._queue(op.vhost, op.queue)
        if queue is None:
            self._write(c.Failed(op.rid, 404, f"no queue '{op.queue}' in vhost '{op.vhost}'"))
            return
        try:
            if not queue.type.gets:
                raise queue.unsupported("basic.get")
            entry = queue.get(auto_settle=op.auto_settle)
        except AMQPError as exc:
            self._write(c.Failed(op.rid, exc.reply_code, exc.reply_text))
            return
        self._got(op.rid, queue, entry, settled=op.auto_settle)

    def _got(self, rid: int, queue: Queue, entry: QueuedMessage | None, *, settled: bool) -> None:
        """Answer a get (or a browser's acquire): ``Empty``, or ``Got`` with the message,
        which the peer settles later unless it was ``settled`` when taken."""
        remaining = min(queue.message_count, 0xFFFFFFFF)
        if entry is None:
            self._write(c.Empty(rid, remaining))
            return
        did = 0
        if not settled:
            did = self.next_did
            self.next_did = did + 1
            self.unsettled[did] = (queue, entry)
        message = entry.message
        self._write(
            c.Got(
                rid,
                did,
                entry.redelivered,
                remaining,
                message.exchange,
                message.routing_key,
                message.format,
                message.raw_properties,
                message.body,
            )
        )

    def _query_offset(self, op: c.QueryOffset) -> None:
        stream = self._queue(op.vhost, op.queue)
        if not isinstance(stream, StreamQueue) or stream.deleted:
            self._write(c.Failed(op.rid, 404, f"no stream '{op.queue}' in vhost '{op.vhost}'"))
            return
        stored = stream.log.offsets.get(op.reference)
        self._write(c.StoredOffset(op.rid, stored is not None, stored or 0))

    def _inspect(self, op: c.Inspect) -> None:
        queue = self._queue(op.vhost, op.queue)
        if queue is None:
            self._write(c.Failed(op.rid, 404, f"no queue '{op.queue}' in vhost '{op.vhost}'"))
            return
        try:
            if op.purge and not queue.type.purges:
                raise queue.unsupported("queue.purge")
            count = queue.purge() if op.purge else queue.lookup(None)
            if queue.config.expires is not None:
                # Asked by a (passive) declaration on another node: a use, as on one node.
                queue.touch()
        except AMQPError as exc:
            self._write(c.Failed(op.rid, exc.reply_code, exc.reply_text))
            return
        self._write(c.Counted(op.rid, min(count, 0xFFFFFFFF), queue.consumer_count))
