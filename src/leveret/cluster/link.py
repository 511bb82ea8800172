"""The inter-node link's dialing side: one persistent connection from this node to each
other node that leads a queue this node's clients use, and the proxies of those queues.

``Links`` owns them: the listener for the peers' links into this node (the front end
``server/cluster_link/``), one :class:`Peer` per other node (made when a queue record names
it leader), and ``make_remote``, which the applier calls for each such record to put a
``RemoteQueue`` in its vhost (``model/queues/remote.py``). A ``Peer`` is the proxies'
``LinkLeader``: it turns their operations into the link's frames (``protocol/cluster/``),
batched per loop turn, and the leader's answers back into the core's calls: confirms
resolve the publishers' completions, deliveries go to the local consumers' owners, a get's
answer resolves the deferred ``basic.get``.

- **Connection.** ``View.cluster_address`` says where a node's link port is (the setting
  ``cluster_peer_addresses`` overrides it: the fault harness's proxies). A lost connection
  is dialled again after 50 ms, doubling up to 1 s while it keeps failing. The handshake
  proves the cluster's secret both ways (etcd's cluster id: only nodes that can read the
  cluster's etcd know it) and names each side's incarnation (the node's start time in ns),
  so a restarted node's old link is closed by the listener. With ``cluster_tls_*`` the
  connection is mutual TLS (``cluster/link_tls.py``) and the handshake runs inside it; a
  TLS reload closes the connections, both ways, with a peer the CRL reloaded revokes
  (``Links.live`` lists them).
- **Credit.** A consumer's credit on the leader is what its owner here can take: its
  prefetch window as it stands (AMQP 1.0's link credit: deliveries in flight are counted),
  at most ``WINDOW`` for a consumer nobody limits; deliveries its owner cannot take at once
  (a full socket) wait here, within that credit. A credit that shrinks is passed on; a 1.0
  drain is the leader's to answer (``Drain``, ``Drained``), as on one node.
- **Back-pressure.** A proxy falls behind (publishers feeding it are paced, as on one node)
  while its leader says the queue's consumers do not keep up (``Backlog``) or while the
  connection's write buffer is over its high-water mark; the bytes waiting, and the
  messages kept for the leader's ``DeliverKept`` (their properties and bodies), count in
  the broker's memory gauge, so the memory alarm blocks publishers as it does when a local
  queue grows. The leader's side is a front end like any other, but its
  memory alarm holds the link's publishes, not the link: ``Taken`` stops, and the window
  holds the publishers here.
- **Loss.** When the link goes (the leader's node died, a partition), publishes waiting for
  its confirm are nacked, gets fail with 404 "home node ... down or inaccessible", consumers
  are cancelled (the client gets basic.cancel), settlements of deliveries made over the old
  connection are dropped (the leader requeued them), and the proxies answer 404 until the
  link is back.
- **Features.** Each side's ``Hello`` names the link features it speaks
  (``codec.FEATURES``); a newer operation goes only to a peer that named it, the older
  form otherwise (a ``Publish`` for each queue rather than ``Also``), so the nodes of a
  cluster are upgraded one at a time. ``LEVERET_LINK_FEATURES`` (read at start, for tests)
  limits what this node announces, as a node of an older version would.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

from leveret.cluster.link_tls import DialNotes, LinkTls, LiveLink, TlsListener
from leveret.config import peer_addresses
from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import stored_message
from leveret.errors import BY_CODE, AMQPError, InternalError, NotFound, PreconditionFailed
from leveret.model.completion import Completion
from leveret.model.entry import QueuedMessage
from leveret.model.queues.args import PLAIN
from leveret.model.queues.base import type_of
from leveret.model.queues.remote import LinkLeader, RemoteQueue
from leveret.model.queues.stream import OFFSET_HEADER, OffsetSpec, StreamConsumer
from leveret.protocol.amqp091.fieldtable import FieldValue, encode_table
from leveret.protocol.cluster import codec as c
from leveret.protocol.cluster.codec import ACCEPT
from leveret.server.cluster_link.frontend import (
    LinkFrontEnd,
    LinkIdentity,
    ReplicaSink,
    agreement,
)
from leveret.server.connection import ConnectionProtocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from leveret.cluster.apply import QueueRecord, View
    from leveret.model.consumer import Consumer
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.server import Server
    from leveret.server.shell.shell import Shell

__all__ = ["WINDOW", "Links", "Peer"]

log = logging.getLogger("leveret.cluster")

T = TypeVar("T")

# Deliveries a consumer nobody limits may have in flight from its leader.
WINDOW: Final = 1000
# Bytes waiting to be written to a peer past which its proxies fall behind.
HIGH_WATER: Final = 1 << 20
# The publishes' window: the weight (``codec.publish_weight``) of publishes sent that the
# leader has not yet said it handled (``Taken``) past which their publishers are held
# until half of it is. It bounds what a consumer's credit or a settlement finds ahead of it
# on the link (about 750 publishes of 256 B).
PUBLISH_WINDOW: Final = 256 << 10
# Seconds publishers held by the window before it is logged (the leader stopped taking).
HELD_WARNING: Final = 10.0
# A replicated queue's consumer refused by its newly elected leader (which had not yet
# applied its own election) is consumed again this often, this many times (3 s in all).
REFUSED_RETRY_DELAY: Final = 0.1
REFUSED_RETRIES: Final = 30
# The window while the queue published to falls behind on its leader (its consumers do not
# keep up: ``Backlog``): small, so that the publisher goes at about their pace, as a paced
# publisher does on one node.
BEHIND_WINDOW: Final = PUBLISH_WINDOW // 8
# Seconds a client's cancel or close waits at most for the leader to have taken it
# (``Peer.caught_up``): a leader stopped with its link still up does not hold it for good.
CAUGHT_UP_TIMEOUT: Final = 5.0
# Seconds a dialled connection has to finish its handshake.
HANDSHAKE_TIMEOUT: Final = 5.0
# The environment variable (a test's knob, not a setting) that names the link features this
# node announces and uses, space- or comma-separated, as a node of an older version would
# (``codec.FEATURES``); unset, all of them.
FEATURES_VARIABLE: Final = "LEVERET_LINK_FEATURES"
# Delivery ids carry the connection's generation above these bits (a settlement of a
# delivery made over an older connection is dropped: the leader requeued it).
_GEN_SHIFT: Final = 40
_DID_MASK: Final = (1 << _GEN_SHIFT) - 1


@dataclass
class _Remote:
    """One local consumer of a queue led by the peer."""

    consumer: Consumer
    queue: RemoteQueue
    # At most this much credit on the leader; told again when what it may take grew by
    # ``threshold``; ``limit``: deliveries (handed here) the leader was last allowed.
    cap: int
    threshold: int
    limit: int
    # Its id on the link (``Peer.consumers``' key).
    cid: int
    # Deliveries handed to the consumer's owner (those waiting in ``buffer`` not counted).
    handed: int = 0
    # In ``Peer.owed``: its credit is looked at when the turn's frames go out.
    owed: bool = False
    buffer: deque[QueuedMessage] = field(default_factory=deque)
    # The leader accepted the consume (``ConsumeOk``); until then, what its owner waits
    # for (``Peer.answer``), if it does.
    ok: bool = False
    answer: Completion[None] | None = None
    # Deliveries wait in ``buffer`` until the owner told its client the consume is on
    # (``Peer.release``): a 0-9-1 consume-ok precedes the first delivery.
    held: bool = False
    # Drains asked of the leader (``Drain``), each done by its answer (``Drained``); no
    # ``Credit`` goes out meanwhile (the last answer tells what the consumer may take).
    drains: deque[Completion[None]] = field(default_factory=deque)
    # The last drain asked for less than the consumer's credit (``cap``).
    capped: bool = False


class _Route:
    """What one proxy's Publish frames carry beside the message: its names
    (``codec.publish_names``, an ``Also``'s), and those with the exchange and routing key
    of its last publish, encoded (``codec.publish_route``): kept while they repeat, as a
    publisher's mostly do, so a publish encodes no name."""

    def __init__(self, names: bytes, exchange: str, routing_key: str) -> None:
        self.names = names
        self.exchange = exchange
        self.routing_key = routing_key
        self.route = c.publish_route(names, exchange, routing_key)

    def routed(self, exchange: str, routing_key: str) -> None:
        """A publish with another exchange or routing key than the last."""
        self.exchange = exchange
        self.routing_key = routing_key
        self.route = c.publish_route(self.names, exchange, routing_key)


class _Connection(asyncio.Protocol):
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.Event()
        self.reset = False  # closed by a reset (RST), not an orderly close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer.connected(self)

    def data_received(self, data: bytes) -> None:
        self.peer.received(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.reset = isinstance(exc, ConnectionResetError)
        self.closed.set()
        self.peer.lost(self)

    def pause_writing(self) -> None:
        self.peer.paused = True

    def resume_writing(self) -> None:
        self.peer.paused = False
        self.peer.account()


class Peer(LinkLeader):
    """The link to one other node, and the ``LinkLeader`` of the queues it leads."""

    def __init__(self, links: Links, node: str) -> None:
        self.links = links
        self.node = node
        self.up = False
        self.conn: _Connection | None = None
        self.generation = 0
        self.reader = c.Reader()
        # The turn's frames (a Publish's in pieces, ``codec.add_publish``), joined at the
        # flush into one write; their size.
        self.frames: list[bytes] = []
        self.size = 0
        self._flush_scheduled = False
        # What this side's Hello asks the leader to prove (``codec.challenge``).
        self.challenge = b""
        self.hello: c.Hello | None = None
        # The link features both sides speak (``codec.FEATURES``), known from the leader's
        # Hello; ``also``: an ``Also`` may go (read once a publish).
        self.agreed: frozenset[str] = c.FEATURES
        self.also = True
        self.paused = False
        self._counted = 0
        # The publishes' flow control: the weight sent on this connection, the weight the
        # leader handled (``Taken``), whether it keeps that account (its first ``Taken``),
        # and what the publishers held by the window wait for.
        self.sent_weight = 0
        self.taken = 0
        self.flow = False
        self._room: Completion[None] | None = None
        self._resume = 0
        # Publishes waiting for the leader's confirm, in order.
        self.seq = 0
        # Confirms awaited from the leader: (publish sequence, its completion, the queue).
        self.waits: deque[tuple[int, Completion[bool], RemoteQueue]] = deque()
        self.next_cid = 1
        self.consumers: dict[int, _Remote] = {}
        # Each proxy's names and route as its Publish frames carry them (``_Route``).
        self.routes: dict[RemoteQueue, _Route] = {}
        # The message of the last Publish on this connection: the same message into
        # another queue of this leader goes as an ``Also`` (a fanout crosses once).
        self.last_message: Message | None = None
        # The message of the last Deliver on this connection (a ``DeliverAlso``'s), and
        # the last ``codec.KEPT`` of those the leader asked to keep (a ``DeliverKept``'s,
        # by the slot each took in turn).
        self.delivered: Message | None = None
        self.kept: list[Message | None] = [None] * c.KEPT
        self.kept_next = 0
        # The size (properties and body) of each slot's message, counted in the broker's
        # memory gauge while the slot holds it: taken off as another takes its slot and,
        # all of them, as the connection goes (``_forget_kept``).
        self.kept_sizes: list[int] = [0] * c.KEPT
        self.gauge = links.server.broker.gauge
        # Each consumer's ``_Remote`` (``consumers`` by the consumer): an ack's credit
        # finds it in one lookup.
        self.remotes: dict[Consumer, _Remote] = {}
        self.next_rid = 1
        # Requests waiting for the leader's answer (gets, inspections), by id.
        self.requests: dict[int, tuple[Completion[Any], RemoteQueue]] = {}
        self.settles: dict[int, list[int]] = {}
        # ``settles[ACCEPT]`` while it is there (``accept``, once an ack): None once
        # ``settles`` is written or dropped.
        self._accepts: list[int] | None = None
        # Consumers whose credit grew this turn (``_advertise``), told at the flush.
        self.owed: list[_Remote] = []
        # Consumers of replicated queues this node was told to find here but did not yet
        # lead (its election's own record not applied when the consume came): how often
        # each was refused in a row.
        self.refused: dict[Consumer, int] = {}
        # The turn's ``caught_up`` barrier, asked at the flush, and the queue it names;
        # how long one waits at most (an attribute: the tests shorten it).
        self._barrier: Completion[None] | None = None
        self._barrier_queue: RemoteQueue | None = None
        self.caught_up_timeout = CAUGHT_UP_TIMEOUT
        self.task: asyncio.Task[None] | None = None
        self.became_up = asyncio.Event()
        # The link was up since the peer last refused a connection (``Links.on_refused``).
        self.was_up = False

    def __repr__(self) -> str:
        return f"Peer({self.node!r}, up={self.up})"

    # -- the connection --------------------------------------------------------------------

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = 0.05
        while not self.links.closing:
            address = self.links.address(self.node)
            if address is not None:
                tls = self.links.tls
                try:
                    options = tls.dial_options(address[0]) if tls else {}
                    _, conn = await loop.create_connection(
                        lambda: _Connection(self), *address, **options
                    )
                except ConnectionRefusedError:
                    self._refused()
                except OSError as exc:
                    if tls is not None:
                        if isinstance(exc, ConnectionResetError):  # in the TLS handshake
                            self._refused()
                        self.links.notes.note(self.node, tls.dial_failed(exc))
                else:
                    up = loop.create_task(self.became_up.wait())
                    closed = loop.create_task(conn.closed.wait())
                    await asyncio.wait(
                        (up, closed), timeout=HANDSHAKE_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
                    )
                    up.cancel()
                    closed.cancel()
                    if not self.became_up.is_set():
                        if conn.closed.is_set():
                            if conn.reset:
                                # Reset before the handshake: what a proxy in front of a
                                # closed port answers.
                                self._refused()
                            else:
                                self.links.notes.closed_early(self.node, tls=tls is not None)
                        else:
                            log.warning("inter-node link to '%s': no handshake", self.node)
                            if conn.transport is not None:
                                conn.transport.abort()
                    else:
                        self.links.notes.clear(self.node)
                    started = loop.time()
                    await conn.closed.wait()
                    if loop.time() - started > 1.0:
                        delay = 0.05
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _refused(self) -> None:
        if self.was_up:
            # Up, then closed, now refused: no process listens there any more.
            self.was_up = False
            if self.links.on_refused is not None:
                self.links.on_refused(self.node)

    def connected(self, conn: _Connection) -> None:
        self.conn = conn
        self.reader = c.Reader()
        self._forget_kept()
        self.hello = None
        self.became_up.clear()
        links = self.links
        hello = c.Hello(
            links.node,
            links.incarnation,
            os.urandom(c.NONCE_SIZE),
            c.cluster_tag(links.secret),
            links.features,
        )
        self.challenge = c.challenge(hello)
        self._write(hello)

    def lost(self, conn: _Connection) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        was_up, self.up = self.up, False
        self.generation += 1
        self.last_message = None
        self._forget_kept()
        self.frames.clear()
        self.size = 0
        self.settles.clear()
        self._accepts = None
        self.owed.clear()
        self.paused = False
        self.account()
        self.sent_weight = self.taken = 0
        self.flow = False
        self._release_publishers()
        if was_up:
            log.warning("inter-node link to node '%s' is down", self.node)
        self.links.now()
        # The next connection's publishes are numbered from 1 (the listener counts them
        # per connection): those waiting on this one are nacked.
        self.seq = 0
        waits, self.waits = self.waits, deque()
        for _seq, done, _queue in waits:
            done.resolve(False)
        requests, self.requests = self.requests, {}
        for request, queue in requests.values():
            request.fail(queue.down())
        barrier, self._barrier = self._barrier, None
        self._barrier_queue = None
        if barrier is not None:  # not asked yet: the leader lost the consumers with the link
            barrier.resolve(None)
        remotes = list(self.consumers.values())
        self.consumers.clear()
        self.remotes.clear()
        for remote in remotes:
            _drains_over(remote)
            if remote.queue.replicated:
                # A replicated queue's consumer stays: it follows the queue to its next
                # leader (or to this one when the link is back), as RabbitMQ's quorum
                # queue consumers do; what was in flight is requeued there.
                continue
            self._end(remote, remote.queue.down())

    def _consume_again(self, remote: _Remote) -> bool:
        """A replicated queue's consumer refused for want of the queue by the node its
        record names as leader: that node won the election and this node's watch brought
        the record before the node's own did. Consumed again shortly, a bounded number of
        times (the consumer is cancelled after that, as for a queue that is gone)."""
        consumer = remote.consumer
        queue = remote.queue
        if not queue.replicated or queue.leader is not self or consumer not in queue.consumers:
            return False
        tries = self.refused.get(consumer, 0) + 1
        if tries > REFUSED_RETRIES:
            return False
        self.refused[consumer] = tries
        asyncio.get_running_loop().call_later(REFUSED_RETRY_DELAY, self.resume)
        return True

    def _end(self, remote: _Remote, error: AMQPError) -> None:
        """The leader ended a consumer (its queue went, or the link): the client is told.
        A consume whose owner waits for the leader's answer (``answer``: a 0-9-1
        consume-ok not sent yet) fails with ``error`` instead, as on one node."""
        consumer = remote.consumer
        remote.queue._detach(consumer)
        answer, remote.answer = remote.answer, None
        if answer is not None:
            answer.fail(error)
            return
        consumer.owner.consumer_removed(consumer)

    def _answered(self, remote: _Remote) -> None:
        remote.ok = True
        answer, remote.answer = remote.answer, None
        if answer is not None:
            answer.resolve(None)

    def answer(self, queue: RemoteQueue, consumer: Consumer) -> Completion[None] | None:
        """The leader's answer to ``consumer``'s consume, for an owner that answers its
        client only then (0-9-1's consume-ok, so that a refusal is the channel error one
        node gives); None when it came already. A replicated queue's consumer follows the
        queue from leader to leader, and is answered at once."""
        remote = self.remotes.get(consumer)
        if remote is None or queue.replicated or remote.ok:
            return None
        remote.held = True
        if remote.answer is None:
            remote.answer = Completion()
        return remote.answer

    def release(self, queue: RemoteQueue, consumer: Consumer) -> None:
        """The owner answered its client (``answer``): deliveries go to the consumer."""
        remote = self.remotes.get(consumer)
        if remote is not None:
            remote.held = False
            self.credit(queue, consumer)

    def received(self, conn: _Connection, data: bytes) -> None:
        if conn is not self.conn:
            return
        self.links.now()
        try:
            ops = self.reader.feed(data)
            for op in ops:
                self._handle(op)
        except (c.LinkError, HandshakeRefused) as exc:
            log.warning("inter-node link to node '%s' closed: %s", self.node, exc)
            if conn.transport is not None:
                conn.transport.abort()

    def _write(self, op: c.Op) -> None:
        self._write_frame(c.encode(op))

    def write_op(self, op: c.Op) -> None:
        """Send ``op`` to the peer (replication's ``Append``)."""
        self._write_frame(c.encode(op))

    def _write_frame(self, frame: bytes) -> None:
        if self.settles:
            self._settled()  # settlements go before what follows them
        self.frames.append(frame)
        self.size += len(frame)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Frames, settlements and credit go out together once this loop turn is over."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _settled(self) -> None:
        """The settlements gathered since the last frame, as frames (one per kind)."""
        settles, self.settles = self.settles, {}
        self._accepts = None
        for kind, dids in settles.items():
            frame = c.settle_frame(kind, dids)
            self.frames.append(frame)
            self.size += len(frame)

    def _flush(self) -> None:
        if self._barrier is not None:
            self._ask_barrier()  # written while the flush is still scheduled: this one
        self._flush_scheduled = False
        conn = self.conn
        if self.settles:
            self._settled()
        if self.owed:
            self._credits()
        frames, self.frames = self.frames, []
        self.size = 0
        if conn is None or conn.transport is None or not frames:
            return
        conn.transport.write(b"".join(frames))
        self.account()

    def account(self) -> None:
        """Count the bytes waiting in the transport in the broker's memory gauge."""
        conn = self.conn
        transport = conn.transport if conn is not None else None
        size = transport.get_write_buffer_size() if transport is not None else 0
        self.links.gauge_add(size - self._counted)
        self._counted = size

    # -- what the leader sends -------------------------------------------------------------

    def _forget_kept(self) -> None:
        """A new connection: the leader starts its kept messages again too."""
        self.delivered = None
        if self.kept_next or self.kept[0] is not None:
            self.kept = [None] * c.KEPT
            self.gauge.bytes -= sum(self.kept_sizes)
            self.kept_sizes = [0] * c.KEPT
        self.kept_next = 0

    def _handle(self, op: c.Op) -> None:
        if isinstance(op, c.Deliver):
            message = self.delivered = self._message(op)
            if op.keep:
                slot = self.kept_next
                self.kept[slot] = message
                self.kept_next = slot + 1 if slot + 1 < c.KEPT else 0
                size = len(op.raw) + len(op.body)
                sizes = self.kept_sizes
                self.gauge.bytes += size - sizes[slot]
                sizes[slot] = size
            self._deliver(op.cid, op.did, op.redelivered, message)
        elif isinstance(op, c.DeliverAlso):
            if self.delivered is None:
                raise c.LinkError("a DeliverAlso before any Deliver")
            self._deliver(op.cid, op.did, op.redelivered, self.delivered)
        elif isinstance(op, c.DeliverKept):
            kept = self.kept[op.slot] if op.slot < c.KEPT else None
            if kept is None:
                raise c.LinkError(f"a DeliverKept of slot {op.slot}, which holds no message")
            self._deliver(op.cid, op.did, op.redelivered, kept)
        elif isinstance(op, c.Confirm):
            self._confirm(op)
        elif isinstance(op, c.Got):
            self._got(op)
        elif isinstance(op, c.Empty):
            pending = self.requests.pop(op.rid, None)
            if pending is not None:
                pending[0].resolve((None, op.remaining))
        elif isinstance(op, c.Counted):
            pending = self.requests.pop(op.rid, None)
            if pending is not None:
                pending[0].resolve((op.messages, op.consumers))
        elif isinstance(op, c.Stats):
            pending = self.requests.pop(op.rid, None)
            if pending is not None:
                pending[0].resolve((op.ready, op.unacked, op.consumers))
        elif isinstance(op, c.StoredOffset):
            pending = self.requests.pop(op.rid, None)
            if pending is not None:
                pending[0].resolve(op.offset if op.found else None)
        elif isinstance(op, c.Failed):
            pending = self.requests.pop(op.rid, None)
            if pending is not None:
                pending[0].fail(_error(op.code, op.text))
        elif isinstance(op, c.Taken):
            self._taken(op)
        elif isinstance(op, c.Backlog):
            self._backlog(op)
        elif isinstance(op, c.Appended):
            if self.links.replication is not None:
                self.links.replication.appended(self.node, op)
        elif isinstance(op, c.Positioned):
            if self.links.replication is not None:
                self.links.replication.positioned(self.node, op)
        elif isinstance(op, c.ConsumeOk):
            remote = self.consumers.get(op.cid)
            if remote is not None:
                self.refused.pop(remote.consumer, None)
                self._answered(remote)
        elif isinstance(op, c.Cancelled):
            remote = self.consumers.pop(op.cid, None)
            if remote is not None:
                self.remotes.pop(remote.consumer, None)
                _drains_over(remote)
                if op.code == NotFound.reply_code and self._consume_again(remote):
                    return
                self.refused.pop(remote.consumer, None)
                if op.code:
                    log.info(
                        "consumer of %s refused by its leader: %s", remote.queue.resource, op.text
                    )
                self._end(remote, _error(op.code, op.text) if op.code else remote.queue.down())
        elif isinstance(op, c.Drained):
            self._drained(op)
        elif isinstance(op, c.Hello):
            self._hello(op)
        elif isinstance(op, c.Proof):
            self._proof(op)
        else:
            raise c.LinkError(f"unexpected {type(op).__name__} from the leader")

    def _taken(self, op: c.Taken) -> None:
        if op.upto > self.sent_weight or op.upto < self.taken:
            raise c.LinkError(f"the leader took {op.upto} of {self.sent_weight} sent")
        self.flow = True
        self.taken = op.upto
        if self._room is not None and self.sent_weight - op.upto <= self._resume:
            self._release_publishers()

    def _release_publishers(self) -> None:
        room, self._room = self._room, None
        if room is not None:
            room.resolve(None)

    def _backlog(self, op: c.Backlog) -> None:
        vhost = self.links.server.broker.vhosts.get(op.vhost)
        queue = vhost.remote_queues.get(op.queue) if vhost is not None else None
        if isinstance(queue, RemoteQueue):
            queue.behind = op.behind

    def _hello(self, op: c.Hello) -> None:
        links = self.links
        if self.hello is not None:
            raise HandshakeRefused("a second hello")
        if op.cluster_tag != c.cluster_tag(links.secret):
            raise HandshakeRefused(f"node '{op.node}' belongs to another cluster")
        if op.node != self.node:
            raise HandshakeRefused(f"expected node '{self.node}', reached '{op.node}'")
        self.hello = op
        self.agreed = links.features & op.speaks
        self.also = c.ALSO in self.agreed
        self._write(c.Proof(c.proof(links.secret, "dialer", links.node, c.challenge(op))))

    def _proof(self, op: c.Proof) -> None:
        hello = self.hello
        if hello is None or self.up:
            raise HandshakeRefused("a proof out of turn")
        expected = c.proof(self.links.secret, "listener", hello.node, self.challenge)
        if not hmac.compare_digest(op.mac, expected):
            raise HandshakeRefused(f"node '{hello.node}' could not prove the cluster's secret")
        self.up = True
        self.was_up = True
        self.became_up.set()
        log.info("inter-node link to node '%s' is up (%s)", self.node, agreement(self.agreed))
        if self.links.replication is not None:
            self.links.replication.peer_up(self.node)
        self.resume()

    def resume(self) -> None:
        """Consumers of replicated queues this node leads that are not registered with it
        (kept over a lost link, or moved here from the proxy of a deposed leader)."""
        if not self.up:
            return
        for vhost in list(self.links.server.broker.vhosts.values()):
            for queue in list(vhost.remote_queues.values()):
                if isinstance(queue, RemoteQueue) and queue.leader is self:
                    for consumer in list(queue.consumers):
                        if consumer not in self.remotes:
                            self.consume(queue, consumer)

    def _confirm(self, op: c.Confirm) -> None:
        waits = self.waits
        if op.multiple:
            while waits and waits[0][0] <= op.upto:
                waits.popleft()[1].resolve(op.ack)
            return
        while waits and waits[0][0] < op.upto:
            # Confirmed earlier by a multiple confirm that named a later one: ack.
            waits.popleft()[1].resolve(True)
        if waits and waits[0][0] == op.upto:
            waits.popleft()[1].resolve(op.ack)

    def _message(self, op: c.Deliver | c.Got) -> Message:
        if op.format:
            return stored_message(op.exchange, op.routing_key, op.raw, op.body, op.format)
        # A 0-9-1 message (most): ``convert/formats.py`` is not compiled, ``wire_message`` is.
        return wire_message(op.exchange, op.routing_key, op.raw, op.body)

    def _deliver(self, cid: int, did: int, redelivered: bool, message: Message) -> None:
        """A delivery (``Deliver``, ``DeliverAlso``) of ``message`` to consumer ``cid``."""
        remote = self.consumers.get(cid)
        if remote is None:
            # Cancelled while this was on its way: the leader takes it back.
            if did:
                self._give_back(did)
            return
        entry = QueuedMessage(self.generation << _GEN_SHIFT | did, message, redelivered)
        consumer = remote.consumer
        if type(consumer) is StreamConsumer:
            _passed(consumer, entry)
        if remote.buffer or remote.held or not consumer.can_take(entry.message):
            remote.buffer.append(entry)
            return
        remote.handed += 1
        consumer.owner.deliver(consumer, entry)
        self._advertise(remote)

    def _give_back(self, did: int) -> None:
        """A delivery nobody here takes (its consumer or get is gone): requeued on the
        leader, now. Left for the next frame, it waited for whatever the link carried next,
        and on a quiet link it stayed unacked on the leader until the link went."""
        self.settles.setdefault(c.REQUEUE, []).append(did)
        self._schedule_flush()

    def _got(self, op: c.Got) -> None:
        pending = self.requests.pop(op.rid, None)
        if pending is None:
            if op.did:
                self._give_back(op.did)
            return
        entry = QueuedMessage(self.generation << _GEN_SHIFT | op.did, self._message(op))
        entry.redelivered = op.redelivered
        pending[0].resolve((entry, op.remaining))

    def _advertise(self, remote: _Remote) -> None:
        """The consumer may take more (an ack, a delivery handed): looked at once the turn
        is over (``_credits``), so a turn's acks make one ``Credit`` at most."""
        if not remote.owed:
            remote.owed = True
            self.owed.append(remote)
            self._schedule_flush()

    def _credits(self) -> None:
        """Tell the leader what each consumer of ``owed`` may take now, when that grew by
        its ``threshold`` (one ``Credit`` frame and one dispatch on the leader a quarter
        window, not an ack), or at all once everything the leader was allowed has arrived
        here (it would send nothing more until told). The leader never has more credit
        than the consumer's owner gives: a prefetch window is exact, its refill coarser."""
        owed, self.owed = self.owed, []
        for remote in owed:
            remote.owed = False
            if remote.drains or self.remotes.get(remote.consumer) is not remote:
                continue  # told once the leader answers the drain; or cancelled meanwhile
            # Never below 0: a prefetch lowered under what is unacked leaves it negative.
            credit = max(0, min(remote.consumer.credit, remote.cap))
            limit = remote.handed + credit
            grown = limit - remote.limit
            if (
                grown >= remote.threshold
                or (grown > 0 and remote.handed + len(remote.buffer) >= remote.limit)
                # Less than before (a 1.0 flow that lowers the link credit, a smaller
                # prefetch): the leader stops short of it, as one node would.
                or grown < 0
            ):
                remote.limit = limit
                frame = c.credit_frame(remote.cid, credit, remote.handed)
                self.frames.append(frame)
                self.size += len(frame)

    # -- LinkLeader: what the proxies ask --------------------------------------------------

    def publish(
        self, queue: RemoteQueue, message: Message, confirm: bool
    ) -> Completion[bool] | None:
        if not self.up:
            return Completion.of(False) if confirm else None
        seq = 0
        done: Completion[bool] | None = None
        if confirm:
            seq = self.seq = self.seq + 1
            done = Completion()
            self.waits.append((seq, done, queue))
        raw, body = message.raw_properties, message.body
        self.sent_weight += c.publish_weight(raw, body)
        exchange, routing_key = message.exchange, message.routing_key
        route = self.routes.get(queue)
        if route is None:
            names = c.publish_names(queue.vhost_name, queue.name)
            route = self.routes[queue] = _Route(names, exchange, routing_key)
        if message is self.last_message and self.also:
            self._write_frame(c.also_frame(seq, route.names))
            return done
        self.last_message = message
        if exchange != route.exchange or routing_key != route.routing_key:
            route.routed(exchange, routing_key)
        if self.settles:
            self._settled()  # settlements go before what follows them
        # The frame's pieces go in the turn's list as they are (``_flush`` joins them).
        self.size += c.add_publish(self.frames, seq, route.route, message.format, raw, body)
        self._schedule_flush()
        return done

    def consume(self, queue: RemoteQueue, consumer: Consumer) -> None:
        cid = self.next_cid
        self.next_cid = cid + 1
        # Credit is re-granted by quarters of the window: a consumer's prefetch window (or
        # 1.0 link credit) as it was given, ``WINDOW`` for one nobody limits; and at once,
        # whatever it comes to, when the leader has used all it was given (``_advertise``).
        credit = min(consumer.credit, WINDOW)
        remote = _Remote(consumer, queue, WINDOW, max(1, credit // 4), credit, cid)
        self.consumers[cid] = remote
        self.remotes[consumer] = remote
        carried = _carried(consumer.arguments, consumer)
        if consumer.browses:
            # The leader browses for it (``codec.BROWSE``): copies, no settlement.
            carried = {**carried, c.BROWSE: True}
        op = c.Consume(
            cid,
            queue.vhost_name,
            queue.name,
            consumer.auto_settle,
            consumer.exclusive,
            credit,
            consumer.priority,
            carried,
        )
        if c.CONSUME_ARGUMENTS in self.agreed:
            self._write(op)
        elif not carried:
            self._write_frame(c.plain_consume_frame(op))
        else:
            # A leader that reads no arguments would consume from the wrong place (a
            # stream's offset) or take what a browser only looks at: refused, as the
            # leader refuses a consumer, once the caller has it.
            text = (
                f"node '{self.node}', the leader of {queue.resource}, reads no consumer "
                f"arguments ({', '.join(sorted(carried))}): upgrade it"
            )
            refusal = c.Cancelled(cid, PreconditionFailed.reply_code, text)
            asyncio.get_running_loop().call_soon(self._handle, refusal)

    def credit(self, queue: RemoteQueue, consumer: Consumer) -> None:
        remote = self.remotes.get(consumer)
        if remote is None or remote.held:
            return
        self._hand(remote)
        self._advertise(remote)

    def drain(self, queue: RemoteQueue, consumer: Consumer) -> Completion[None] | None:
        """``consumer`` drains (``Source.drain``): what waits here for it is handed, then
        the leader delivers what the queue holds up to its credit and answers (``Drain``,
        ``Drained``); done on that answer, its deliveries handed before. None: it is not
        consumed there (cancelled, the link down), nothing to wait for."""
        remote = self.remotes.get(consumer)
        if remote is None or not self.up:
            return None
        done: Completion[None] = Completion()
        remote.drains.append(done)
        self._ask_drain(remote.cid, remote)
        return done

    def _ask_drain(self, cid: int, remote: _Remote) -> None:
        consumer = remote.consumer
        self._hand(remote)
        # At most ``cap`` a request (what may wait here for an owner that cannot take);
        # the drain asks again while the leader had that much (``_drained``).
        credit = max(0, min(consumer.credit, remote.cap))
        remote.capped = consumer.credit > credit
        remote.limit = remote.handed + credit
        self._write(c.Drain(cid, credit, remote.handed))

    def _hand(self, remote: _Remote) -> None:
        """What waits here for the consumer goes to it, while it takes."""
        if remote.held:
            return
        consumer = remote.consumer
        buffer = remote.buffer
        while buffer and consumer.can_take(buffer[0].message):
            remote.handed += 1
            consumer.owner.deliver(consumer, buffer.popleft())

    def _drained(self, op: c.Drained) -> None:
        """The leader answered a drain: what it delivered for it came before."""
        remote = self.consumers.get(op.cid)
        if remote is None or not remote.drains:
            return  # cancelled meanwhile (its drains are over)
        self._hand(remote)
        last = len(remote.drains) == 1
        if (
            last
            and remote.capped
            and not remote.buffer
            and remote.consumer.credit > 0
            and remote.handed >= remote.limit
        ):
            # The leader sent all it was asked for (``cap``) and the consumer can take
            # more: the queue may hold more.
            self._ask_drain(op.cid, remote)
            return
        done = remote.drains.popleft()
        if last:
            # The leader gave up the rest of the consumer's credit; what the consumer may
            # take still (a flow since the drain) is told again.
            remote.limit = remote.handed + len(remote.buffer)
            self._advertise(remote)
        done.resolve(None)

    def cancel(self, queue: RemoteQueue, consumer: Consumer) -> None:
        self.refused.pop(consumer, None)
        remote = self.remotes.pop(consumer, None)
        if remote is None:
            return
        cid = remote.cid
        del self.consumers[cid]
        _drains_over(remote)
        if self.up:
            self._write(c.Cancel(cid))
        if not consumer.auto_settle and remote.buffer:
            # Never handed to the client: the leader takes them back.
            self.settle(c.REQUEUE, remote.buffer)
        remote.buffer.clear()

    def caught_up(self, queue: RemoteQueue) -> Completion[None] | None:
        """Done once the leader has handled every consumer's operation this node sent it
        so far (what a cancel's answer waits for: ``RemoteQueue.withdrawn``), once the
        link is lost, or after ``CAUGHT_UP_TIMEOUT`` (a leader that stopped answering does
        not hold a client's cancel or close for good); None while it is down (the leader
        lost this node's consumers with it).

        The barrier is a ``Stat`` of ``queue`` written last at the turn's flush (one for
        every caller of the turn), not an op of its own: the link is ordered, and the
        leader handles the consumers' operations (``Cancel`` among them) it read before
        the ``Stat`` ahead of it (its front end's ``_CONTROL``, or in order); any answer,
        a 404 for a queue gone meanwhile too, ends it."""
        if not self.up:
            return None
        barrier = self._barrier
        if barrier is None:
            barrier = self._barrier = Completion()
            self._barrier_queue = queue
            self._schedule_flush()
        return barrier

    def _ask_barrier(self) -> None:
        """The turn's ``caught_up`` barrier: its ``Stat``, after everything else written."""
        barrier, queue = self._barrier, self._barrier_queue
        self._barrier = self._barrier_queue = None
        if barrier is None or queue is None:
            return
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.caught_up_timeout, barrier.resolve, None)
        barrier.on_done(lambda _done: timer.cancel())
        self.stats(queue).on_done(lambda _answer: barrier.resolve(None))

    def settle(self, kind: int, entries: Iterable[QueuedMessage]) -> None:
        generation = self.generation
        dids = self.settles.get(kind)
        for entry in entries:
            if entry.seq >> _GEN_SHIFT != generation or not self.up:
                continue  # made over an older connection: the leader requeued it
            if dids is None:
                dids = self.settles[kind] = []
            dids.append(entry.seq & _DID_MASK)
        if dids:
            self._schedule_flush()

    def accept(self, entry: QueuedMessage) -> None:
        """``settle(ACCEPT, (entry,))`` for the one delivery an ack settles. A turn's
        settlements wait in ``settles`` only while its flush is scheduled (``_flush``,
        ``_write_frame`` and ``publish`` take them out, and whatever adds one schedules
        it), so only the kind's first one of a turn schedules it."""
        seq = entry.seq
        if seq >> _GEN_SHIFT != self.generation or not self.up:
            return  # made over an older connection: the leader requeued it
        dids = self._accepts
        if dids is None:
            # The turn's first ack, or its first since the settlements were written (or a
            # ``settle`` of the kind started the list).
            dids = self.settles.get(ACCEPT)
            if dids is None:
                dids = self.settles[ACCEPT] = []
                self._schedule_flush()
            self._accepts = dids
        dids.append(seq & _DID_MASK)

    def _ask(
        self, queue: RemoteQueue, done: Completion[T], op: Callable[[int], c.Op]
    ) -> Completion[T]:
        """Send the request ``op(request id)``; ``done`` is resolved by its answer (failed
        with the queue's down error when the link is down, or when it drops)."""
        if not self.up:
            done.fail(queue.down())
            return done
        rid = self.next_rid
        self.next_rid = rid + 1
        self.requests[rid] = (done, queue)
        self._write(op(rid))
        return done

    def get(
        self, queue: RemoteQueue, auto_settle: bool
    ) -> Completion[tuple[QueuedMessage | None, int]]:
        v, name = queue.vhost_name, queue.name
        return self._ask(queue, Completion(), lambda rid: c.Get(rid, v, name, auto_settle))

    def acquire(
        self, queue: RemoteQueue, entry: QueuedMessage
    ) -> Completion[tuple[QueuedMessage | None, int]] | None:
        """Take on the leader the message a browsing consumer was sent (``entry``, named
        by its position there: ``codec.BROWSED``), answered as a get; None when ``entry``
        is no such copy from this connection (a leader that predates browsing consumed
        for it; the link went since): not asked."""
        seq = entry.seq
        if not seq & c.BROWSED or (seq & ~c.BROWSED) >> _GEN_SHIFT != self.generation:
            return None
        v, name, position = queue.vhost_name, queue.name, seq & _DID_MASK
        return self._ask(queue, Completion(), lambda rid: c.Acquire(rid, v, name, position))

    def inspect(self, queue: RemoteQueue, purge: bool) -> Completion[tuple[int, int]]:
        v, name = queue.vhost_name, queue.name
        return self._ask(queue, Completion(), lambda rid: c.Inspect(rid, v, name, purge))

    def store_offset(self, queue: RemoteQueue, reference: str, offset: int) -> None:
        """A stream-protocol client here stores a consumer offset: the leader's log keeps
        it (lost, as RabbitMQ's, while the leader is unreachable)."""
        if self.up:
            self._write(c.StoreOffset(queue.vhost_name, queue.name, reference, offset))

    def query_offset(self, queue: RemoteQueue, reference: str) -> Completion[int | None]:
        """The offset the leader's log keeps for ``reference`` (None: none). It follows
        every store sent before it on this link: a client reads what it stored."""
        v, name = queue.vhost_name, queue.name
        return self._ask(queue, Completion(), lambda rid: c.QueryOffset(rid, v, name, reference))

    def stats(self, queue: RemoteQueue) -> Completion[tuple[int, int, int]]:
        """The queue's counters at its leader: ready, unacknowledged, consumers."""
        v, name = queue.vhost_name, queue.name
        return self._ask(queue, Completion(), lambda rid: c.Stat(rid, v, name))

    def backlogged(self) -> bool:
        return self.paused or self.size > HIGH_WATER

    def room(self, behind: bool) -> Completion[None] | None:
        """What a publisher that just forwarded here waits for before its next publish:
        None while the leader keeps up; past the window (``BEHIND_WINDOW`` for a queue
        falling behind), until it has handled all but half of it (or the link goes)."""
        if not self.flow:
            return None
        window = BEHIND_WINDOW if behind else PUBLISH_WINDOW
        if self.sent_weight - self.taken <= window:
            return None
        room = self._room
        if room is None:
            self._resume = window // 2
            room = self._room = Completion()
            asyncio.get_running_loop().call_later(HELD_WARNING, self._still_held, room)
        return room

    def _still_held(self, room: Completion[None]) -> None:
        if room is self._room and not room.done:
            log.warning(
                "publishers to node '%s' held for %.0f s: %d bytes of publishes sent, %d "
                "taken by the leader, resuming at %d outstanding",
                self.node,
                HELD_WARNING,
                self.sent_weight,
                self.taken,
                self._resume,
            )

    def dropped(self, queue: RemoteQueue) -> None:
        """The proxy goes: the queue was deleted, or another node leads it now (an
        election, a hand-over). Its consumers are cancelled here, and the publishes to it
        still waiting for this leader's confirm are refused at once (the publisher may
        send them again) rather than when a cut-off leader's link drops or heals: a
        deposed leader confirms nothing more, and the new leader never had them."""
        self.routes.pop(queue, None)
        for consumer in list(queue.consumers):
            self.cancel(queue, consumer)
        for _seq, done, waiting in self.waits:
            if waiting is queue:
                done.resolve(False)


class ReplicationHooks(ReplicaSink, Protocol):
    """What the link tells replicated queues (``cluster/replication.py``)."""

    def appended(self, node: str, op: c.Appended) -> None: ...

    def positioned(self, node: str, op: c.Positioned) -> None: ...

    def peer_up(self, node: str) -> None: ...


def announced(environ: Mapping[str, str]) -> frozenset[str]:
    """The link features this node announces: ``FEATURES_VARIABLE``'s, else all."""
    value = environ.get(FEATURES_VARIABLE)
    if value is None:
        return c.FEATURES
    names = frozenset(value.replace(",", " ").split())
    unknown = names - c.FEATURES
    if unknown:
        log.warning("%s: unknown link features %s ignored", FEATURES_VARIABLE, sorted(unknown))
    return names & c.FEATURES


class HandshakeRefused(Exception):
    """The node reached is not the peer expected, or cannot prove the cluster's secret."""


# The consumer arguments a leader's queue reads, carried with a Consume (a stream's start
# and filters); the priority travels apart, the rest are the consumer's node's own.
_CARRIED_ARGUMENTS: Final = ("x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered")


def _carried(arguments: Mapping[str, object], consumer: object = None) -> Mapping[str, FieldValue]:
    carried: dict[str, FieldValue] = {}
    for key in _CARRIED_ARGUMENTS:
        if key not in arguments:
            continue
        value = cast("FieldValue", arguments[key])
        try:
            encode_table({key: value})
        except AMQPError:
            continue  # a value 0-9-1 cannot carry (another protocol's type): left out
        carried[key] = value
    if isinstance(consumer, StreamConsumer) and consumer.spec.kind == "offset":
        # A stream consumer consumed again (its stream's new leader): from the offset
        # after the last it was given, not from where it first asked.
        carried[OFFSET_HEADER] = consumer.spec.value
    return carried


def _passed(consumer: StreamConsumer, entry: QueuedMessage) -> None:
    """A stream consumer through the link was given ``entry``: it resumes after it."""
    headers = entry.message.headers
    offset = headers.get(OFFSET_HEADER) if headers else None
    if isinstance(offset, int) and not isinstance(offset, bool):
        consumer.spec = OffsetSpec("offset", offset + 1)


def _drains_over(remote: _Remote) -> None:
    """The consumer is off the leader (cancelled, ended, the link gone): its drains are
    over with what came."""
    drains = remote.drains
    while drains:
        drains.popleft().resolve(None)


def _error(code: int, text: str) -> AMQPError:
    kind = BY_CODE.get(code)
    return kind(text) if kind is not None else InternalError(text)


class Links:
    """This node's inter-node links: its listener and its peers; see the module docstring."""

    def __init__(self, server: Server, node: str, view: View) -> None:
        self.server = server
        self.node = node
        self.view = view
        self.overrides = peer_addresses(server.settings)
        # TLS on the link (``cluster_tls_*``, ``cluster/link_tls.py``); None = plain TCP.
        self.tls = LinkTls(server.settings) if server.settings.cluster_tls_certfile else None
        if self.tls is not None:
            self.tls.live = self.live
        self.notes = DialNotes()
        self.incarnation = time.time_ns()
        # The link features this node announces (all but for a test: ``announced``).
        self.features = announced(os.environ)
        # The cluster's id in etcd, known once the node joined (``set_secret``).
        self.secret = ""
        self.peers: dict[str, Peer] = {}
        self.closing = False
        self.identity: LinkIdentity | None = None
        self.listener: asyncio.Server | TlsListener | None = None
        self.connections: set[ConnectionProtocol] = set()
        self.port = 0
        # Replicated queues (``cluster/replication.py``), set by the node.
        self.replication: ReplicationHooks | None = None
        # Told the name of a peer whose link was up and whose port now refuses connections
        # (its process is gone, as after kill -9), set by the node.
        self.on_refused: Callable[[str], None] | None = None

    def set_secret(self, secret: str) -> None:
        self.secret = secret
        self.identity = LinkIdentity(
            self.node, secret, self.incarnation, replicas=self.replication, features=self.features
        )

    def address(self, node: str) -> tuple[str, int] | None:
        return self.view.cluster_address(node, self.overrides)

    def live(self) -> Iterator[LiveLink]:
        """The link connections up: this node's dials and the peers' it accepted (a TLS
        reload checks their certificates, ``LinkTls.after_reload``)."""
        for node, peer in self.peers.items():
            conn = peer.conn
            if conn is not None and conn.transport is not None:
                address = self.address(node)
                shown = f"{address[0]}:{address[1]}" if address is not None else "?"
                yield LiveLink("to", node, shown, conn.transport)
        for accepted in self.connections:
            shell = accepted.shell
            if accepted.transport is None or shell is None:
                continue
            front = shell.front
            hello = front.peer if isinstance(front, LinkFrontEnd) else None
            named = hello.node if hello is not None else None
            yield LiveLink("from", named, accepted.peer, accepted.transport)

    def now(self) -> None:
        broker = self.server.broker
        broker.timers.now = asyncio.get_running_loop().time()

    def gauge_add(self, delta: int) -> None:
        if delta:
            self.server.broker.gauge.bytes += delta

    def peer(self, node: str) -> Peer:
        peer = self.peers.get(node)
        if peer is None:
            peer = self.peers[node] = Peer(self, node)
            peer.start()
        return peer

    def make_remote(self, vhost: VirtualHost, record: QueueRecord) -> Queue:
        """The proxy of a queue ``record`` says another node leads (the applier's hook)."""
        arguments = record.arguments
        try:
            config = type_of(arguments, queue=record.name, vhost=vhost.name).parse(
                arguments,
                queue=record.name,
                vhost=vhost.name,
                durable=record.durable,
                exclusive=record.exclusive,
                auto_delete=record.auto_delete,
            )
        except AMQPError:
            config = PLAIN  # the leader accepted them; its rules may be newer than ours
        proxy = RemoteQueue(
            self.peer(record.leader),
            vhost,
            record.name,
            durable=record.durable,
            auto_delete=record.auto_delete,
            exclusive=record.exclusive,
            arguments=arguments,
            config=config,
        )
        # A replicated queue's publishes wait for its leader (nacked while it is down and
        # no other member was elected yet), never dropped as unroutable.
        proxy.replicated = record.replicated
        return proxy

    async def listen(self) -> int:
        """Open the listener on ``cluster_port`` for the other nodes' links; the port."""
        server = self.server
        settings = server.settings
        loop = asyncio.get_running_loop()

        def front_end(shell: Shell) -> Any:
            assert self.identity is not None
            return LinkFrontEnd(shell, self.identity)

        def connection() -> asyncio.Protocol:
            return ConnectionProtocol(
                server.broker,
                server.users,
                server.limits,
                self.connections,
                server.alarm,
                front_end=front_end,
            )

        if self.tls is not None:
            self.listener = await self.tls.listen(connection, settings.host, settings.cluster_port)
        else:
            self.listener = await loop.create_server(
                connection, host=settings.host, port=settings.cluster_port, reuse_address=True
            )
        # Read untyped: uvloop's server gives a list where asyncio's gives the tuple the
        # stubs name, and the compiled build checks what the stubs say.
        listener: Any = self.listener
        sockets = listener.sockets
        self.port = sockets[0].getsockname()[1] if sockets else settings.cluster_port
        log.info(
            "inter-node link listening on %s:%d%s",
            settings.host,
            self.port,
            "" if self.tls is None else " (TLS)",
        )
        return self.port

    async def close(self) -> None:
        self.closing = True
        if self.listener is not None:
            self.listener.close()
        for conn in list(self.connections):
            conn.shutdown("node stopping")
        for peer in self.peers.values():
            if peer.task is not None:
                peer.task.cancel()
            if peer.conn is not None and peer.conn.transport is not None:
                peer.conn.transport.close()
        await asyncio.gather(
            *(p.task for p in self.peers.values() if p.task is not None), return_exceptions=True
        )
