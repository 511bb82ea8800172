"""The inter-node link's wire format: frames, the handshake, and the operations a node asks
of the leader of a queue (and the answers), sans-IO.

A frame is ``u32 length | u8 op | payload`` (the length counts the op and the payload).
Strings are ``u16 length`` + UTF-8, byte strings ``u32 length`` + bytes, integers big-endian.
A message travels as it is kept (``exchange``, ``routing_key``, its form number, the encoded
properties and the body: ``convert/formats.py``'s stored form), so the leader re-sends the
bytes a consumer gets without converting anything.

The handshake (both sides, before any other frame): each sends :class:`Hello` (its node
name, its incarnation: the node's lease epoch, a fresh nonce, a tag naming its cluster and
the link features it speaks), and on the peer's ``Hello`` a :class:`Proof`: an
HMAC-SHA256, keyed by the cluster's secret, of its role, its own name and the peer's
challenge (its nonce and features as sent: :func:`challenge`, :func:`proof`). A peer of
another cluster, or one that cannot prove the secret, is refused.

Features (``FEATURES``) are the operations, or forms of one, that came after others a peer
may be using instead: each side sends one only to a peer whose ``Hello`` named it, and the
older form otherwise, so the nodes of a cluster are upgraded one at a time. A ``Hello``
without the set is a node of 2026-11-28's version, which speaks ``UNANNOUNCED``.

Operations are batched by the writer: everything a loop turn produces goes out in one
write (:class:`Writer`), and the reader decodes every whole frame a read brings
(:class:`Reader`). Bad input raises :class:`LinkError`, never anything else.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import sys
from array import array
from collections.abc import Mapping  # noqa: TC003
from dataclasses import dataclass, field
from typing import Final

from leveret.errors import AMQPError
from leveret.protocol.amqp091.fieldtable import (
    FieldTable,
    FieldValue,
    decode_table,
    encode_table,
)

# Mapping is imported at run time: the compiled build (mypyc) reads a dataclass's field
# types when the module loads (Consume.arguments).

# The operations are plain (not frozen) dataclasses: a frozen one's ``__init__`` sets each
# field with ``object.__setattr__``. The ``__init__`` that ``dataclasses`` writes is Python
# even in the compiled build, so the per-message and per-turn ones (``Publish``,
# ``Deliver``, ``Credit``, ``Settle``, ``Confirm``, ``Taken``) write their own, which mypyc
# compiles: a ``Deliver`` read in 0.16 µs, 0.43 with the generated one (docs/benchmarks.md).
# Nothing hashes an operation or changes one once made.

__all__ = [
    "ALSO",
    "BROWSE",
    "BROWSED",
    "CONSUME_ARGUMENTS",
    "DELIVER_ALSO",
    "DELIVER_KEPT",
    "FEATURES",
    "KEEP_MAX",
    "KEPT",
    "MAX_FRAME",
    "NAMES_KEPT",
    "TAKEN",
    "UNANNOUNCED",
    "Acquire",
    "Also",
    "Append",
    "Appended",
    "Backlog",
    "Cancel",
    "Cancelled",
    "Confirm",
    "Consume",
    "ConsumeOk",
    "Counted",
    "Credit",
    "Deliver",
    "DeliverAlso",
    "DeliverKept",
    "Drain",
    "Drained",
    "Empty",
    "Failed",
    "Get",
    "Got",
    "Hello",
    "Inspect",
    "LinkError",
    "Op",
    "Positioned",
    "Proof",
    "Publish",
    "QueryOffset",
    "Reader",
    "Settle",
    "StoreOffset",
    "StoredOffset",
    "Taken",
    "Writer",
    "challenge",
    "encode",
    "plain_consume_frame",
    "proof",
    "publish_weight",
]

# A frame larger than this is refused (a message body is at most 512 MiB on 0-9-1).
MAX_FRAME: Final = (512 << 20) + (1 << 20)

# Settle kinds.
ACCEPT: Final = 0
REJECT: Final = 1
REQUEUE: Final = 2

# A ``Consume``'s argument (true) that makes the leader's consumer a browser: it is sent
# copies of what the queue holds and of what arrives, nothing is taken, and its deliveries
# need no settlement (AMQP 0-10's not-acquired subscriptions on another node). In the
# arguments rather than a new operation, so that a leader that predates it still reads the
# ``Consume``: it then consumes, unsettled (the dialer asks for that), and what it delivers
# stays unacknowledged until the link goes, when it is requeued: nothing is taken for good.
BROWSE: Final = "x-leveret-browse"
# A browser's delivery id: this flag and the message's position in the leader's queue
# (what ``Acquire`` names), never a delivery to settle (a leader's ids are a count from 1).
BROWSED: Final = 1 << 62

# The link's features: operations (or forms of one) a node sends only to a peer that named
# them in its ``Hello``, the older form to any other. Adding one is a line here and the
# check where it is sent (``feature in agreed``): the names are what peers announce.
TAKEN: Final = "taken"  # the leader's Taken (without: no window, publishers never held)
ALSO: Final = "also"  # Also (without: the message whole in a Publish per queue)
DELIVER_ALSO: Final = "deliver-also"  # DeliverAlso (without: a Deliver each, whole)
CONSUME_ARGUMENTS: Final = "consume-arguments"  # a Consume's field table (without: none)
# DeliverKept, and a Deliver's keep (without: a Deliver each, whole, but DeliverAlso's)
DELIVER_KEPT: Final = "deliver-kept"
FEATURES: Final = frozenset((TAKEN, ALSO, DELIVER_ALSO, CONSUME_ARGUMENTS, DELIVER_KEPT))
# What a Hello without a set speaks: every feature of 2026-11-28's main, the version before
# features were announced (nodes of that version upgrade to this one and later one at a
# time; versions before it, which lack some of these, are upgraded all at once). Never
# grows: a feature made later is spoken only by peers that announce it.
UNANNOUNCED: Final = frozenset((TAKEN, ALSO, DELIVER_ALSO, CONSUME_ARGUMENTS))
# The nonce's length. A Hello's nonce field carries the features after it
# (``_FEATURES_MARK`` and their names): 2026-11-28's decoder refuses any byte after the
# cluster's tag, but takes a nonce of any length up to 255 and proves what it got, so the
# set rides there, and each side's proof covers the features it announced. The names are
# sorted, one space apart, the only form read: the reader makes the proven bytes again.
NONCE_SIZE: Final = 16
_FEATURES_MARK: Final = b"\x01"


class LinkError(AMQPError):
    """The peer sent what the link's format does not allow."""

    reply_code = 501  # FRAME_ERROR


@dataclass(slots=True)
class Hello:
    node: str
    incarnation: int
    nonce: bytes
    cluster_tag: str
    # The link features the sender speaks; None: it announced none (``UNANNOUNCED``).
    features: frozenset[str] | None = None

    @property
    def speaks(self) -> frozenset[str]:
        """What the sender can be sent (unknown names it announced are left out)."""
        return UNANNOUNCED if self.features is None else self.features & FEATURES


@dataclass(slots=True)
class Proof:
    mac: bytes


@dataclass(slots=True)
class Publish:
    """A message routed on the sender's node to ``queue``, led here. ``seq`` > 0: the
    sender wants a :class:`Confirm` once this node has done what it does before confirming
    (synced to disk for a persistent message in a durable queue); 0: no confirm."""

    seq: int
    vhost: str
    queue: str
    exchange: str
    routing_key: str
    format: int
    raw: bytes
    body: bytes

    def __init__(
        self,
        seq: int,
        vhost: str,
        queue: str,
        exchange: str,
        routing_key: str,
        format: int,
        raw: bytes,
        body: bytes,
    ) -> None:
        self.seq = seq
        self.vhost = vhost
        self.queue = queue
        self.exchange = exchange
        self.routing_key = routing_key
        self.format = format
        self.raw = raw
        self.body = body


@dataclass(slots=True)
class Also:
    """The message of the last :class:`Publish` on this link, routed on the sender's node
    to ``queue`` as well (led here too): a message routed to several queues of one leader
    (a fanout) crosses the link once. ``seq`` as a :class:`Publish`'s."""

    seq: int
    vhost: str
    queue: str

    def __init__(self, seq: int, vhost: str, queue: str) -> None:
        self.seq = seq
        self.vhost = vhost
        self.queue = queue


@dataclass(slots=True)
class Confirm:
    """Publishes up to ``upto`` (all since the last confirm when ``multiple``) confirmed
    (``ack``) or refused."""

    upto: int
    multiple: bool
    ack: bool

    def __init__(self, upto: int, multiple: bool, ack: bool) -> None:
        self.upto = upto
        self.multiple = multiple
        self.ack = ack


@dataclass(slots=True)
class Consume:
    cid: int
    vhost: str
    queue: str
    auto_settle: bool
    exclusive: bool
    credit: int
    priority: int
    # The consumer's arguments (x-stream-offset for a stream, ...), as a 0-9-1 field table.
    arguments: Mapping[str, FieldValue] = field(default_factory=dict)


@dataclass(slots=True)
class ConsumeOk:
    cid: int


@dataclass(slots=True)
class Credit:
    """The consumer may have ``credit`` deliveries beyond the first ``received`` of its
    (AMQP 1.0's link credit: deliveries in flight are counted, never lost)."""

    cid: int
    credit: int
    received: int

    def __init__(self, cid: int, credit: int, received: int) -> None:
        self.cid = cid
        self.credit = credit
        self.received = received


@dataclass(slots=True)
class Cancel:
    cid: int


@dataclass(slots=True)
class Cancelled:
    """The leader ended the consumer (its queue went) or refused it (``code`` > 0)."""

    cid: int
    code: int
    text: str


@dataclass(slots=True)
class Deliver:
    """A message to the peer's consumer ``cid``. ``keep``: the peer keeps the message in
    the next kept slot (:class:`DeliverKept`); written in the flags byte with
    ``redelivered`` (bit 1), so a Deliver without it is the bytes it always was."""

    cid: int
    did: int
    redelivered: bool
    exchange: str
    routing_key: str
    format: int
    raw: bytes
    body: bytes
    keep: bool

    def __init__(
        self,
        cid: int,
        did: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        format: int,
        raw: bytes,
        body: bytes,
        keep: bool = False,
    ) -> None:
        self.cid = cid
        self.did = did
        self.redelivered = redelivered
        self.exchange = exchange
        self.routing_key = routing_key
        self.format = format
        self.raw = raw
        self.body = body
        self.keep = keep


@dataclass(slots=True)
class DeliverAlso:
    """The message of the last :class:`Deliver` on this link, delivered to consumer
    ``cid`` as well (``did`` and ``redelivered`` its own): a message a fanout put in
    several queues of this leader crosses back once while their consumers take it in turn,
    as an :class:`Also` carries it once the other way."""

    cid: int
    did: int
    redelivered: bool

    def __init__(self, cid: int, did: int, redelivered: bool) -> None:
        self.cid = cid
        self.did = did
        self.redelivered = redelivered


@dataclass(slots=True)
class DeliverKept:
    """The message of an earlier :class:`Deliver` on this link, the one that took kept
    ``slot``, delivered to consumer ``cid`` (``did`` and ``redelivered`` its own). A
    fanout's queues led here deliver to the peer's consumers as their credit comes, each a
    burst of its own, so the same message seldom goes twice in a row (a
    :class:`DeliverAlso`): the leader asks the peer to keep a message it may deliver again
    (a Deliver's ``keep``), both sides keep the last ``KEPT`` of them, each in the next
    slot in turn (the link is ordered: they number them alike), and a message delivered
    again crosses as its slot."""

    cid: int
    did: int
    redelivered: bool
    slot: int

    def __init__(self, cid: int, did: int, redelivered: bool, slot: int) -> None:
        self.cid = cid
        self.did = did
        self.redelivered = redelivered
        self.slot = slot


@dataclass(slots=True)
class Settle:
    """Deliveries ``dids`` accepted, rejected (dead-lettered where the queue says) or
    requeued."""

    kind: int
    dids: tuple[int, ...]

    def __init__(self, kind: int, dids: tuple[int, ...]) -> None:
        self.kind = kind
        self.dids = dids


@dataclass(slots=True)
class Get:
    rid: int
    vhost: str
    queue: str
    auto_settle: bool


@dataclass(slots=True)
class Got:
    rid: int
    did: int
    redelivered: bool
    remaining: int
    exchange: str
    routing_key: str
    format: int
    raw: bytes
    body: bytes


@dataclass(slots=True)
class Empty:
    rid: int
    remaining: int


@dataclass(slots=True)
class Inspect:
    """Ask for the queue's counts (a declaration's answer), or purge it (``purge``)."""

    rid: int
    vhost: str
    queue: str
    purge: bool


@dataclass(slots=True)
class Counted:
    """The answer to :class:`Inspect`: ready messages (purged ones, for a purge) and
    consumers."""

    rid: int
    messages: int
    consumers: int


@dataclass(slots=True)
class Backlog:
    """The leader's ``queue`` is falling behind (``behind``: its consumers do not keep up),
    or no longer: the sending node paces the publishers that feed it, as one node does."""

    vhost: str
    queue: str
    behind: bool


@dataclass(slots=True)
class Taken:
    """The leader has handled the publishes of this connection up to ``upto``, their
    :func:`publish_weight` summed since the handshake: the publishes' flow control (the
    sending node holds its publishers while more than a window is unaccounted for). The
    leader sends ``Taken(0)`` after its ``Proof``, saying it keeps this account."""

    upto: int

    def __init__(self, upto: int) -> None:
        self.upto = upto


@dataclass(slots=True)
class Failed:
    """A request (``rid``) failed with an AMQP code and text (404, 405, 540...)."""

    rid: int
    code: int
    text: str


@dataclass(slots=True)
class Append:
    """A replicated queue's leader ships its log: ``record`` (``cluster/replication.py``'s
    encoding of one operation) at ``offset``, written in ``epoch``, to a follower's node."""

    vhost: str
    queue: str
    epoch: int
    offset: int
    record: bytes


@dataclass(slots=True)
class Appended:
    """The follower has ``queue``'s log up to ``offset`` on disk (``epoch``: its view)."""

    vhost: str
    queue: str
    epoch: int
    offset: int


@dataclass(slots=True)
class Positioned:
    """A replicated stream's follower answers the leader's reset ``sync``: its copy holds
    the leader's log up to ``offset`` (kept, or started again), on disk."""

    vhost: str
    queue: str
    epoch: int
    sync: int
    offset: int


@dataclass(slots=True)
class StoreOffset:
    """A stream-protocol client on the sending node stores a consumer offset of ``queue``
    (a stream): the leader keeps it in its log, as its own clients' (no answer: the stream
    protocol has none)."""

    vhost: str
    queue: str
    reference: str
    offset: int


@dataclass(slots=True)
class QueryOffset:
    """Ask the leader of ``queue`` (a stream) for the offset stored for ``reference``;
    answered with :class:`StoredOffset` (or :class:`Failed`)."""

    rid: int
    vhost: str
    queue: str
    reference: str


@dataclass(slots=True)
class StoredOffset:
    """The answer to :class:`QueryOffset` (``found`` False: none stored)."""

    rid: int
    found: bool
    offset: int


@dataclass(slots=True)
class Stat:
    """Ask for the queue's counters (``leveret ctl list_queues`` on another node): not a
    use of the queue, unlike :class:`Inspect`. Answered with :class:`Stats` (or
    :class:`Failed`)."""

    rid: int
    vhost: str
    queue: str


@dataclass(slots=True)
class Stats:
    """The answer to :class:`Stat`: ready and unacknowledged messages, consumers."""

    rid: int
    ready: int
    unacked: int
    consumers: int


@dataclass(slots=True)
class Drain:
    """The consumer drains (AMQP 1.0's flow with drain): it may have ``credit`` deliveries
    beyond the first ``received`` of its, as :class:`Credit` says; the leader delivers what
    the queue holds up to that, then gives up the rest (its credit 0) and answers
    :class:`Drained`, after those deliveries. Taken in order with the publishes before it,
    as a get is (a drain sees what was published before it)."""

    cid: int
    credit: int
    received: int


@dataclass(slots=True)
class Acquire:
    """Take the message a browser was sent (its delivery id's ``position`` in the queue,
    ``BROWSED`` cleared) unsettled, if it is still ready (AMQP 0-10's message.acquire of a
    browsed message on another node): answered as a get is (``Got``, ``Empty``,
    ``Failed``)."""

    rid: int
    vhost: str
    queue: str
    position: int


@dataclass(slots=True)
class Drained:
    """The answer to :class:`Drain`: the leader delivered what it held for it (those
    deliveries came before this) and the consumer has no credit left there."""

    cid: int


Op = (
    Hello
    | Proof
    | Publish
    | Confirm
    | Consume
    | ConsumeOk
    | Credit
    | Cancel
    | Cancelled
    | Deliver
    | Settle
    | Get
    | Got
    | Empty
    | Failed
    | Backlog
    | Inspect
    | Counted
    | Also
    | Append
    | Appended
    | Taken
    | Positioned
    | StoreOffset
    | QueryOffset
    | StoredOffset
    | Stat
    | Stats
    | Drain
    | Drained
    | Acquire
    | DeliverAlso
    | DeliverKept
)

# What a publish counts for besides its properties and body (its frame's head, names).
PUBLISH_OVERHEAD: Final = 64


def publish_weight(raw: bytes, body: bytes) -> int:
    """A publish's share of the publishes' window, reckoned alike on both nodes."""
    return len(raw) + len(body) + PUBLISH_OVERHEAD


_HEAD: Final = struct.Struct(">IB")
_U8: Final = struct.Struct(">B")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_I32: Final = struct.Struct(">i")


def proof(secret: str, role: str, node: str, nonce: bytes) -> bytes:
    """What a node proves in its :class:`Proof`: the HMAC of its role ("dialer" or
    "listener"), its name and the peer's nonce, keyed by the cluster's secret."""
    data = role.encode() + b"\0" + node.encode() + b"\0" + nonce
    return hmac.new(secret.encode(), data, hashlib.sha256).digest()


def challenge(hello: Hello) -> bytes:
    """What a :class:`Proof` answering ``hello`` proves: its nonce field as sent (the nonce
    and the features), so a peer that reads the field as a nonce proves the same bytes."""
    features = hello.features
    if features is None:
        return hello.nonce
    if any(not n.isascii() or not n or " " in n for n in features):
        raise ValueError(f"a link feature's name that cannot be sent: {sorted(features)}")
    names = " ".join(sorted(features)).encode()
    return hello.nonce + _FEATURES_MARK + names


def cluster_tag(secret: str) -> str:
    """A public name of the cluster (a hash of its secret): a peer of another cluster is
    told apart from one with a wrong proof."""
    return hashlib.sha256(b"leveret-cluster\0" + secret.encode()).hexdigest()[:16]


# -- encoding ----------------------------------------------------------------------------


def _s(value: str) -> bytes:
    data = value.encode()
    if len(data) > 0xFFFF:
        raise ValueError("string too long for the link")
    return _U16.pack(len(data)) + data


def _b(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


def _message(exchange: str, routing_key: str, fmt: int, raw: bytes, body: bytes) -> bytes:
    return b"".join((_s(exchange), _s(routing_key), _U8.pack(fmt), _b(raw), _b(body)))


# The per-message frames' heads (then, in a Publish and a Deliver, the names' and the keys'
# lengths and bytes, the form and the properties' length, the properties, the body's length
# and the body): one ``b"".join`` a frame, one ``pack`` call at most.
_PUBLISH_HEAD: Final = struct.Struct(">IBQ")  # and an Also's
_DELIVER_ALSO: Final = struct.Struct(">IBIQB")
_DELIVER_KEPT: Final = struct.Struct(">IBIQBH")
_MESSAGE_TAIL: Final = struct.Struct(">BI")
_SETTLE_HEAD: Final = struct.Struct(">IBBI")


# Lengths under 256 (names, most properties), as 2 and 4 bytes, taken from a table rather
# than packed: a ``pack`` is a Python method call, even compiled.
_SMALL16: Final = tuple(_U16.pack(n) for n in range(256))
_SMALL32: Final = tuple(_U32.pack(n) for n in range(256))
_TAIL0: Final = tuple(_MESSAGE_TAIL.pack(0, n) for n in range(256))  # a 0-9-1 message's


def _len16(n: int) -> bytes:
    return _SMALL16[n] if n < 256 else _U16.pack(n)


def _len32(n: int) -> bytes:
    return _SMALL32[n] if n < 256 else _U32.pack(n)


def _tail(fmt: int, n: int) -> bytes:
    """The message's form and its properties' length."""
    return _TAIL0[n] if fmt == 0 and n < 256 else _MESSAGE_TAIL.pack(fmt, n)


def _short(value: str) -> bytes:
    data = value.encode()
    if len(data) > 0xFFFF:
        raise ValueError("string too long for the link")
    return data


def publish_names(vhost: str, queue: str) -> bytes:
    """A :class:`Publish` frame's names (its vhost and queue), encoded: the same for every
    publish to one queue, so its sender keeps them."""
    v, q = _short(vhost), _short(queue)
    return b"".join((_len16(len(v)), v, _len16(len(q)), q))


def publish_frame(
    seq: int,
    vhost: str,
    queue: str,
    exchange: str,
    routing_key: str,
    fmt: int,
    raw: bytes,
    body: bytes,
) -> bytes:
    """:class:`Publish`'s frame, written directly (once per message forwarded)."""
    return named_publish_frame(
        seq, publish_names(vhost, queue), exchange, routing_key, fmt, raw, body
    )


def named_publish_frame(
    seq: int,
    names: bytes,
    exchange: str,
    routing_key: str,
    fmt: int,
    raw: bytes,
    body: bytes,
) -> bytes:
    """:func:`publish_frame` with its names from :func:`publish_names`: the pieces of
    :func:`add_publish` (the one place a Publish's layout is written) joined."""
    pieces: list[bytes] = []
    add_publish(pieces, seq, publish_route(names, exchange, routing_key), fmt, raw, body)
    return b"".join(pieces)


def also_frame(seq: int, names: bytes) -> bytes:
    """:class:`Also`'s frame, its names from :func:`publish_names`."""
    return _PUBLISH_HEAD.pack(1 + 8 + len(names), 28, seq) + names


# A Publish's code and a sequence number of 0 (no confirm wanted), before its route.
_UNNUMBERED: Final = b"\x03" + bytes(8)


def publish_route(names: bytes, exchange: str, routing_key: str) -> tuple[bytes, bytes]:
    """What a :class:`Publish` frame carries between its sequence number and its message's
    form (its names from :func:`publish_names`, the exchange, the routing key), encoded;
    and the same behind the code and a sequence number of 0. A publisher's publishes to
    one queue mostly repeat them, so the sender keeps both for :func:`add_publish`."""
    e, r = _short(exchange), _short(routing_key)
    route = b"".join((names, _len16(len(e)), e, _len16(len(r)), r))
    return route, _UNNUMBERED + route


def add_publish(
    pieces: list[bytes],
    seq: int,
    route: tuple[bytes, bytes],
    fmt: int,
    raw: bytes,
    body: bytes,
) -> int:
    """:func:`named_publish_frame`'s bytes as pieces appended to ``pieces``, its route from
    :func:`publish_route`; the frame's length returned. The dialling side joins its turn's
    frames in one write: a frame of its own would be a join and a copy more a message."""
    n = len(raw)
    m = len(body)
    size = 1 + 8 + len(route[0]) + 9 + n + m
    if seq:
        pieces.append(_PUBLISH_HEAD.pack(size, 3, seq))
        pieces.append(route[0])
    else:
        pieces.append(_len32(size))
        pieces.append(route[1])
    _add_content(pieces, fmt, raw, body)
    return 4 + size


def deliver_frame(
    cid: int,
    did: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    fmt: int,
    raw: bytes,
    body: bytes,
    keep: bool = False,
) -> bytes:
    """:class:`Deliver`'s frame, written directly (once per message delivered)."""
    return routed_deliver_frame(
        cid, did, redelivered | keep << 1, deliver_route(exchange, routing_key), fmt, raw, body
    )


def deliver_route(exchange: str, routing_key: str) -> bytes:
    """A :class:`Deliver`'s exchange and routing key with their lengths, encoded: what
    :func:`routed_deliver_frame` takes. A queue's deliveries mostly repeat them (a
    publisher's routing key), so the leader keeps them by routing key and encodes no name
    a delivery."""
    e, r = _short(exchange), _short(routing_key)
    return b"".join((_len16(len(e)), e, _len16(len(r)), r))


def routed_deliver_frame(
    cid: int, did: int, flags: int, route: bytes, fmt: int, raw: bytes, body: bytes
) -> bytes:
    """:func:`deliver_frame` with its flags (bit 0 redelivered, bit 1 keep) and its route
    from :func:`deliver_route`: the pieces of :func:`add_deliver` joined."""
    pieces: list[bytes] = []
    add_deliver(pieces, cid, did, flags, route, fmt, raw, body)
    return b"".join(pieces)


def add_deliver(
    pieces: list[bytes],
    cid: int,
    did: int,
    flags: int,
    route: bytes,
    fmt: int,
    raw: bytes,
    body: bytes,
) -> int:
    """:func:`routed_deliver_frame`'s bytes as pieces appended to ``pieces`` (the one place
    a Deliver's layout is written); the frame's length returned. The leader joins its
    turn's frames once (``LinkFrontEnd.take_output``), as the dialling side does its
    publishes (:func:`add_publish`): no join and copy of a frame of its own a delivery.

    The head is two ``int.to_bytes`` (the length, code and consumer id; the delivery id
    and flags), each a C call compiled, where a ``Struct.pack`` is a Python-level method
    call with five boxed arguments."""
    n = len(raw)
    m = len(body)
    size = 1 + 4 + 8 + 1 + len(route) + 1 + 4 + n + 4 + m
    pieces.append((size << 40 | 10 << 32 | cid).to_bytes(9, "big"))
    pieces.append((did << 8 | flags).to_bytes(9, "big"))
    pieces.append(route)
    _add_content(pieces, fmt, raw, body)
    return 4 + size


def _add_content(pieces: list[bytes], fmt: int, raw: bytes, body: bytes) -> None:
    """A Publish's or a Deliver's last fields (properties' format and bytes, the body), as
    pieces."""
    n = len(raw)
    pieces.append(_tail(fmt, n))
    if n:
        pieces.append(raw)
    m = len(body)
    pieces.append(_len32(m))
    if m:
        pieces.append(body)


# A Settle's delivery ids, big-endian u64s, packed and read as one array: per id a
# ``pack`` or ``unpack`` is a Python method call even compiled, and a turn's Settle
# carries an id for each ack of the turn (four a message in scenario d).
_SWAP: Final = sys.byteorder == "little"
_WIDE: Final = array("Q").itemsize == 8


def settle_frame(kind: int, dids: list[int] | tuple[int, ...]) -> bytes:
    """:class:`Settle`'s frame, its ids packed together."""
    if not _WIDE:
        return encode(Settle(kind, tuple(dids)))
    ids = array("Q", dids)
    if _SWAP:
        ids.byteswap()
    return _SETTLE_HEAD.pack(1 + 1 + 4 + 8 * len(dids), 11, kind, len(dids)) + ids.tobytes()


def _dids_at(data: bytes, pos: int, count: int) -> tuple[int, ...]:
    """``count`` big-endian u64s at ``pos`` (the caller checked they are there)."""
    if not _WIDE:
        return struct.unpack_from(f">{count}Q", data, pos)
    ids = array("Q", data[pos : pos + 8 * count])
    if _SWAP:
        ids.byteswap()
    return tuple(ids)


def deliver_also_frame(cid: int, did: int, redelivered: bool) -> bytes:
    """:class:`DeliverAlso`'s frame, written directly. Its code is 33: 32 is ``Acquire``'s
    (a browsed message taken), made on another branch at the same time."""
    return _DELIVER_ALSO.pack(1 + 4 + 8 + 1, 33, cid, did, redelivered)


# The messages each side of a link keeps for :class:`DeliverKept`: the last ``KEPT``
# Delivers with ``keep``, which the leader sets only for a message whose properties and
# body are at most ``KEEP_MAX`` bytes: at most 4 MiB a link on each node.
KEPT: Final = 1024
KEEP_MAX: Final = 4096


def deliver_kept_frame(cid: int, did: int, redelivered: bool, slot: int) -> bytes:
    """:class:`DeliverKept`'s frame, written directly. Its code is 34, after
    ``DeliverAlso``'s."""
    return _DELIVER_KEPT.pack(1 + 4 + 8 + 1 + 2, 34, cid, did, redelivered, slot)


_CREDIT: Final = struct.Struct(">IBIIQ")


def credit_frame(cid: int, credit: int, received: int) -> bytes:
    """:class:`Credit`'s frame, written directly (a consumer's quarter window of acks on
    the peer's side: one ``pack``, not an op and three)."""
    return _CREDIT.pack(1 + 4 + 4 + 8, 7, cid, credit, received)


def _payload(op: Op) -> tuple[int, bytes]:
    if isinstance(op, Deliver):
        return 10, b"".join(
            (
                _U32.pack(op.cid),
                _U64.pack(op.did),
                _U8.pack(op.redelivered | op.keep << 1),
                _message(op.exchange, op.routing_key, op.format, op.raw, op.body),
            )
        )
    if isinstance(op, Publish):
        return 3, b"".join(
            (
                _U64.pack(op.seq),
                _s(op.vhost),
                _s(op.queue),
                _message(op.exchange, op.routing_key, op.format, op.raw, op.body),
            )
        )
    if isinstance(op, Also):
        return 28, _U64.pack(op.seq) + _s(op.vhost) + _s(op.queue)
    if isinstance(op, Settle):
        return 11, _U8.pack(op.kind) + _U32.pack(len(op.dids)) + b"".join(
            _U64.pack(d) for d in op.dids
        )
    if isinstance(op, Confirm):
        return 4, _U64.pack(op.upto) + _U8.pack(op.multiple | op.ack << 1)
    if isinstance(op, Credit):
        return 7, _U32.pack(op.cid) + _U32.pack(op.credit) + _U64.pack(op.received)
    if isinstance(op, Hello):
        if op.features is not None and len(op.nonce) != NONCE_SIZE:
            raise ValueError(f"a Hello with features has a nonce of {NONCE_SIZE} bytes")
        nonce = challenge(op)
        if len(nonce) > 255:
            raise ValueError("nonce too long")
        return 1, b"".join(
            (
                _s(op.node),
                _U64.pack(op.incarnation),
                _U8.pack(len(nonce)) + nonce,
                _s(op.cluster_tag),
            )
        )
    if isinstance(op, Proof):
        return 2, _b(op.mac)
    if isinstance(op, Consume):
        return 5, _consume(op) + encode_table(op.arguments)
    if isinstance(op, ConsumeOk):
        return 6, _U32.pack(op.cid)
    if isinstance(op, Cancel):
        return 8, _U32.pack(op.cid)
    if isinstance(op, Cancelled):
        return 9, _U32.pack(op.cid) + _U16.pack(op.code) + _s(op.text)
    if isinstance(op, Acquire):
        return 32, _U32.pack(op.rid) + _s(op.vhost) + _s(op.queue) + _U64.pack(op.position)
    if isinstance(op, Get):
        return 12, _U32.pack(op.rid) + _s(op.vhost) + _s(op.queue) + _U8.pack(op.auto_settle)
    if isinstance(op, Got):
        return 13, b"".join(
            (
                _U32.pack(op.rid),
                _U64.pack(op.did),
                _U8.pack(op.redelivered),
                _U32.pack(op.remaining),
                _message(op.exchange, op.routing_key, op.format, op.raw, op.body),
            )
        )
    if isinstance(op, Empty):
        return 14, _U32.pack(op.rid) + _U32.pack(op.remaining)
    if isinstance(op, Failed):
        return 15, _U32.pack(op.rid) + _U16.pack(op.code) + _s(op.text)
    if isinstance(op, Backlog):
        return 16, _s(op.vhost) + _s(op.queue) + _U8.pack(op.behind)
    if isinstance(op, Inspect):
        return 17, _U32.pack(op.rid) + _s(op.vhost) + _s(op.queue) + _U8.pack(op.purge)
    if isinstance(op, Counted):
        return 18, _U32.pack(op.rid) + _U32.pack(op.messages) + _U32.pack(op.consumers)
    if isinstance(op, Append):
        return 19, b"".join(
            (_s(op.vhost), _s(op.queue), _U64.pack(op.epoch), _U64.pack(op.offset), _b(op.record))
        )
    if isinstance(op, Appended):
        return 20, _s(op.vhost) + _s(op.queue) + _U64.pack(op.epoch) + _U64.pack(op.offset)
    if isinstance(op, Taken):
        return 21, _U64.pack(op.upto)
    if isinstance(op, Positioned):
        return 22, b"".join(
            (_s(op.vhost), _s(op.queue), _U64.pack(op.epoch), _U64.pack(op.sync),
             _U64.pack(op.offset))
        )  # fmt: skip
    if isinstance(op, StoreOffset):
        return 23, _s(op.vhost) + _s(op.queue) + _s(op.reference) + _U64.pack(op.offset)
    if isinstance(op, QueryOffset):
        return 24, _U32.pack(op.rid) + _s(op.vhost) + _s(op.queue) + _s(op.reference)
    if isinstance(op, StoredOffset):
        return 25, _U32.pack(op.rid) + _U8.pack(op.found) + _U64.pack(op.offset)
    if isinstance(op, Stat):
        return 26, _U32.pack(op.rid) + _s(op.vhost) + _s(op.queue)
    if isinstance(op, Stats):
        return 27, b"".join(
            (_U32.pack(op.rid), _U64.pack(op.ready), _U64.pack(op.unacked),
             _U32.pack(op.consumers))
        )  # fmt: skip
    if isinstance(op, Drain):
        return 29, _U32.pack(op.cid) + _U32.pack(op.credit) + _U64.pack(op.received)
    if isinstance(op, Drained):
        return 31, _U32.pack(op.cid)
    if isinstance(op, DeliverAlso):
        return 33, _U32.pack(op.cid) + _U64.pack(op.did) + _U8.pack(op.redelivered)
    if isinstance(op, DeliverKept):
        return 34, b"".join(
            (_U32.pack(op.cid), _U64.pack(op.did), _U8.pack(op.redelivered), _U16.pack(op.slot))
        )
    raise TypeError(f"not a link operation: {op!r}")


def _consume(op: Consume) -> bytes:
    return b"".join(
        (
            _U32.pack(op.cid),
            _s(op.vhost),
            _s(op.queue),
            _U8.pack(op.auto_settle | op.exclusive << 1),
            _U32.pack(op.credit),
            _I32.pack(op.priority),
        )
    )


def plain_consume_frame(op: Consume) -> bytes:
    """``op``'s frame without its arguments, for a peer without ``CONSUME_ARGUMENTS``."""
    if op.arguments:
        raise ValueError("a Consume with arguments for a peer that reads none")
    payload = _consume(op)
    return _HEAD.pack(len(payload) + 1, 5) + payload


def encode(op: Op) -> bytes:
    """One frame."""
    if isinstance(op, Publish):
        return publish_frame(
            op.seq, op.vhost, op.queue, op.exchange, op.routing_key, op.format, op.raw, op.body
        )
    if isinstance(op, Deliver):
        return deliver_frame(
            op.cid,
            op.did,
            op.redelivered,
            op.exchange,
            op.routing_key,
            op.format,
            op.raw,
            op.body,
            op.keep,
        )
    if isinstance(op, DeliverAlso):
        return deliver_also_frame(op.cid, op.did, op.redelivered)
    if isinstance(op, DeliverKept):
        return deliver_kept_frame(op.cid, op.did, op.redelivered, op.slot)
    if isinstance(op, Settle) and _WIDE:
        return settle_frame(op.kind, op.dids)
    code, payload = _payload(op)
    return _HEAD.pack(len(payload) + 1, code) + payload


class Writer:
    """Frames waiting for the next write: a turn's operations go out together."""

    __slots__ = ("frames", "size")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.size = 0

    def add(self, op: Op) -> None:
        frame = encode(op)
        self.frames.append(frame)
        self.size += len(frame)

    def take(self) -> bytes:
        data = b"".join(self.frames)
        self.frames.clear()
        self.size = 0
        return data


# -- decoding ----------------------------------------------------------------------------


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.data):
            raise LinkError("truncated link frame")
        part = self.data[self.pos : end]
        self.pos = end
        return part

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u16(self) -> int:
        return int(_U16.unpack(self.take(2))[0])

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack(self.take(8))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def flag(self) -> bool:
        value = self.u8()
        if value > 1:
            raise LinkError(f"bad boolean {value} in a link frame")
        return bool(value)

    def s(self) -> str:
        try:
            return str(self.take(self.u16()), "utf-8")
        except UnicodeDecodeError:
            raise LinkError("a link frame's string is not UTF-8") from None

    def b(self) -> bytes:
        return bytes(self.take(self.u32()))

    def table(self) -> FieldTable:
        try:
            table, end = decode_table(bytes(self.data), self.pos)
        except AMQPError as exc:
            raise LinkError(f"a link frame's field table: {exc}") from None
        if end > len(self.data):
            raise LinkError("truncated link frame")
        self.pos = end
        return table

    def message(self) -> tuple[str, str, int, bytes, bytes]:
        return self.s(), self.s(), self.u8(), self.b(), self.b()

    def end(self) -> None:
        if self.pos != len(self.data):
            raise LinkError("trailing bytes in a link frame")


def _decode(code: int, c: _Cursor) -> Op:
    op: Op
    if code == 10:
        cid, did, flags = c.u32(), c.u64(), c.u8()
        if flags > 3:
            raise LinkError(f"bad deliver flags {flags}")
        op = Deliver(cid, did, flags & 1 == 1, *c.message(), flags > 1)
    elif code == 3:
        seq, vhost, queue = c.u64(), c.s(), c.s()
        op = Publish(seq, vhost, queue, *c.message())
    elif code == 11:
        kind = c.u8()
        if kind > REQUEUE:
            raise LinkError(f"bad settle kind {kind}")
        count = c.u32()
        if count * 8 > len(c.data) - c.pos:
            raise LinkError("truncated link frame")
        op = Settle(kind, tuple(c.u64() for _ in range(count)))
    elif code == 4:
        upto, bits = c.u64(), c.u8()
        if bits > 3:
            raise LinkError("bad confirm flags")
        op = Confirm(upto, bool(bits & 1), bool(bits & 2))
    elif code == 7:
        op = Credit(c.u32(), c.u32(), c.u64())
    elif code == 28:
        op = Also(c.u64(), c.s(), c.s())
    elif code == 1:
        node, incarnation = c.s(), c.u64()
        nonce = bytes(c.take(c.u8()))
        features: frozenset[str] | None = None
        if len(nonce) > NONCE_SIZE and nonce[NONCE_SIZE : NONCE_SIZE + 1] == _FEATURES_MARK:
            written = nonce[NONCE_SIZE + 1 :]
            try:
                names = written.decode("ascii").split(" ") if written else []
            except UnicodeDecodeError:
                raise LinkError("a Hello's features are not ASCII") from None
            # Only as ``challenge`` writes them (sorted, once each, one space apart): what a
            # proof covers is made again from them, and must be the bytes the peer sent.
            if names != sorted(set(names)) or "" in names:
                raise LinkError(f"a Hello's features not in their order: {written!r}")
            features = frozenset(names)
            nonce = nonce[:NONCE_SIZE]
        op = Hello(node, incarnation, nonce, c.s(), features)
    elif code == 2:
        op = Proof(c.b())
    elif code == 5:
        cid, vhost, queue, bits = c.u32(), c.s(), c.s(), c.u8()
        if bits > 3:
            raise LinkError("bad consume flags")
        credit, priority = c.u32(), c.i32()
        # Without its table: a peer that does not read ours (``CONSUME_ARGUMENTS``).
        arguments = c.table() if c.pos < len(c.data) else {}
        op = Consume(cid, vhost, queue, bool(bits & 1), bool(bits & 2), credit, priority, arguments)
    elif code == 6:
        op = ConsumeOk(c.u32())
    elif code == 8:
        op = Cancel(c.u32())
    elif code == 9:
        op = Cancelled(c.u32(), c.u16(), c.s())
    elif code == 12:
        op = Get(c.u32(), c.s(), c.s(), c.flag())
    elif code == 13:
        rid, did, redelivered, remaining = c.u32(), c.u64(), c.flag(), c.u32()
        op = Got(rid, did, redelivered, remaining, *c.message())
    elif code == 14:
        op = Empty(c.u32(), c.u32())
    elif code == 15:
        op = Failed(c.u32(), c.u16(), c.s())
    elif code == 16:
        op = Backlog(c.s(), c.s(), c.flag())
    elif code == 17:
        op = Inspect(c.u32(), c.s(), c.s(), c.flag())
    elif code == 18:
        op = Counted(c.u32(), c.u32(), c.u32())
    elif code == 19:
        op = Append(c.s(), c.s(), c.u64(), c.u64(), c.b())
    elif code == 20:
        op = Appended(c.s(), c.s(), c.u64(), c.u64())
    elif code == 21:
        op = Taken(c.u64())
    elif code == 22:
        op = Positioned(c.s(), c.s(), c.u64(), c.u64(), c.u64())
    elif code == 23:
        op = StoreOffset(c.s(), c.s(), c.s(), c.u64())
    elif code == 24:
        op = QueryOffset(c.u32(), c.s(), c.s(), c.s())
    elif code == 25:
        op = StoredOffset(c.u32(), c.flag(), c.u64())
    elif code == 26:
        op = Stat(c.u32(), c.s(), c.s())
    elif code == 27:
        op = Stats(c.u32(), c.u64(), c.u64(), c.u32())
    elif code == 29:
        op = Drain(c.u32(), c.u32(), c.u64())
    elif code == 31:
        op = Drained(c.u32())
    elif code == 32:
        op = Acquire(c.u32(), c.s(), c.s(), c.u64())
    elif code == 33:
        op = DeliverAlso(c.u32(), c.u64(), c.flag())
    elif code == 34:
        op = DeliverKept(c.u32(), c.u64(), c.flag(), c.u16())
    else:
        raise LinkError(f"unknown link operation {code}")
    c.end()
    return op


def _u32_at(data: bytes, pos: int) -> int:
    return data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]


def _string_at(data: bytes, pos: int) -> tuple[str, int]:
    n = data[pos] << 8 | data[pos + 1]
    pos += 2
    if not n:
        return "", pos
    return data[pos : pos + n].decode(), pos + n


def _tail_at(data: bytes, pos: int) -> tuple[int, bytes, bytes, int]:
    """A message's form, properties and body at ``pos`` (after its names), and their end."""
    fmt = data[pos]
    n = _u32_at(data, pos + 1)
    pos += 5
    raw = data[pos : pos + n]
    pos += n
    n = _u32_at(data, pos)
    pos += 4
    body = data[pos : pos + n]
    return fmt, raw, body, pos + n


# Names a leader's reader keeps as text, by their bytes (a Publish's four), before it
# starts again: a link's publishes name the same few queues, exchanges and routing keys.
# Longer ones (up to 4 x 64 KiB) are decoded each time.
NAMES_KEPT: Final = 256
NAMES_KEPT_SIZE: Final = 1024


class Reader:
    """Bytes in, operations out: :meth:`feed` returns every whole frame's operation.

    The per-message frames (Publish, Deliver) are read straight from the bytes, with their
    bytes' own indexing, not ``struct`` (in the compiled build an index is a C call
    returning a small int, an ``unpack_from`` a Python method call and a tuple: 0.66
    against 1.41 µs a Deliver read, docs/benchmarks.md). A Publish's four names are
    decoded once a link (``NAMES_KEPT`` of them, by their bytes): one slice and a dict
    lookup a publish instead of a slice and a decode a name, and the queue's name comes
    with its hash, which the leader's lookup of the queue then need not compute; an
    Also's two alike. A Settle's ids are read as one array, not one ``unpack`` each."""

    __slots__ = ("_also_names", "_buffer", "_names")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._names: dict[bytes, tuple[str, ...]] = {}
        self._also_names: dict[bytes, tuple[str, ...]] = {}

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Op]:
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) >= 4:
                length = int.from_bytes(buffer[:4], "big")
                if length < 1 or length > MAX_FRAME:
                    raise LinkError(f"link frame of {length} bytes")
                if len(buffer) < 4 + length:
                    return []  # a large frame still arriving: no copy until it is whole
            data = bytes(buffer)
        ops: list[Op] = []
        pos = 0
        size = len(data)
        try:
            while size - pos >= 5:
                length = _u32_at(data, pos)
                code = data[pos + 4]
                if length < 1 or length > MAX_FRAME:
                    raise LinkError(f"link frame of {length} bytes")
                end = pos + 4 + length
                if end > size:
                    break
                if code == 10:
                    ops.append(_deliver(data, pos + 5, end))
                elif code == 33 and length == 14:
                    ops.append(_deliver_also(data, pos + 5))
                elif code == 34 and length == 16:
                    ops.append(_deliver_kept(data, pos + 5))
                elif code == 3:
                    ops.append(self._publish(data, pos + 5, end))
                elif code == 28:
                    ops.append(self._also(data, pos + 5, end))
                elif code == 11:
                    ops.append(_settle(data, pos + 5, end))
                else:
                    ops.append(_decode(code, _Cursor(memoryview(data)[pos + 5 : end])))
                pos = end
        finally:
            self._buffer = bytearray(data[pos:]) if pos < size else bytearray()
        return ops

    def _publish(self, data: bytes, pos: int, end: int) -> Publish:
        """A Publish, read straight from the bytes (once per message). Past the frame's
        end, a string or byte string is cut short (``p`` then says so) and an integer
        raises IndexError."""
        try:
            seq = _u32_at(data, pos) << 32 | _u32_at(data, pos + 4)
            names, p = _kept_names(self._names, data, pos + 8, end, 4)
            fmt, raw, body, p = _tail_at(data, p)
        except (IndexError, UnicodeDecodeError):
            raise LinkError("malformed link frame") from None
        _ends(p, end)
        return Publish(seq, names[0], names[1], names[2], names[3], fmt, raw, body)

    def _also(self, data: bytes, pos: int, end: int) -> Also:
        """An Also, read straight from the bytes (once for each further queue of a fanout's
        message), its two names kept as a Publish's four are (``_also_names``)."""
        try:
            seq = _u32_at(data, pos) << 32 | _u32_at(data, pos + 4)
            names, p = _kept_names(self._also_names, data, pos + 8, end, 2)
        except (IndexError, UnicodeDecodeError):
            raise LinkError("malformed link frame") from None
        _ends(p, end)
        return Also(seq, names[0], names[1])


def _kept_names(
    kept: dict[bytes, tuple[str, ...]], data: bytes, start: int, end: int, count: int
) -> tuple[tuple[str, ...], int]:
    """The ``count`` strings at ``start`` and where they end, decoded once a link: kept in
    ``kept`` by their bytes (``NAMES_KEPT`` sets of at most ``NAMES_KEPT_SIZE`` bytes). A
    Publish's and an Also's names are kept apart (the same bytes read as four strings or
    two are not the same names)."""
    p = start
    for _ in range(count):
        p += 2 + (data[p] << 8 | data[p + 1])
    if p > end:
        raise LinkError("truncated link frame")
    key = data[start:p]
    names = kept.get(key)
    if names is None:
        decoded = []
        q = start
        for _ in range(count):
            name, q = _string_at(data, q)
            decoded.append(name)
        names = tuple(decoded)
        if p - start <= NAMES_KEPT_SIZE:
            if len(kept) >= NAMES_KEPT:
                kept.clear()
            kept[key] = names
    return names, p


def _settle(data: bytes, pos: int, end: int) -> Settle:
    """A Settle, read straight from the bytes, its ids as one array (``_dids_at``)."""
    if end - pos < 5:
        raise LinkError("truncated link frame")
    kind = data[pos]
    if kind > REQUEUE:
        raise LinkError(f"bad settle kind {kind}")
    count = _u32_at(data, pos + 1)
    pos += 5
    if count * 8 != end - pos:
        raise LinkError(
            "truncated link frame" if count * 8 > end - pos else "trailing bytes in a link frame"
        )
    return Settle(kind, _dids_at(data, pos, count))


def _deliver(data: bytes, pos: int, end: int) -> Deliver:
    """A Deliver, read straight from the bytes (once per message delivered), as
    :meth:`Reader._publish` (its names not kept: two, the exchange mostly empty, where a
    slice and a lookup cost what a decode does)."""
    try:
        cid = _u32_at(data, pos)
        did = _u32_at(data, pos + 4) << 32 | _u32_at(data, pos + 8)
        flags = data[pos + 12]
        if flags > 3:
            raise LinkError(f"bad deliver flags {flags}")
        exchange, p = _string_at(data, pos + 13)
        routing_key, p = _string_at(data, p)
        fmt, raw, body, p = _tail_at(data, p)
    except (IndexError, UnicodeDecodeError):
        raise LinkError("malformed link frame") from None
    _ends(p, end)
    return Deliver(cid, did, flags & 1 == 1, exchange, routing_key, fmt, raw, body, flags > 1)


def _deliver_also(data: bytes, pos: int) -> DeliverAlso:
    """A DeliverAlso of the right length, read straight from the bytes."""
    redelivered = data[pos + 12]
    if redelivered > 1:
        raise LinkError(f"bad boolean {redelivered} in a link frame")
    did = _u32_at(data, pos + 4) << 32 | _u32_at(data, pos + 8)
    return DeliverAlso(_u32_at(data, pos), did, redelivered == 1)


def _deliver_kept(data: bytes, pos: int) -> DeliverKept:
    """A DeliverKept of the right length, read straight from the bytes."""
    redelivered = data[pos + 12]
    if redelivered > 1:
        raise LinkError(f"bad boolean {redelivered} in a link frame")
    did = _u32_at(data, pos + 4) << 32 | _u32_at(data, pos + 8)
    slot = data[pos + 13] << 8 | data[pos + 14]
    return DeliverKept(_u32_at(data, pos), did, redelivered == 1, slot)


def _ends(p: int, end: int) -> None:
    """A frame read to ``p`` was ``end`` long."""
    if p != end:
        raise LinkError("truncated link frame" if p > end else "trailing bytes in a link frame")
