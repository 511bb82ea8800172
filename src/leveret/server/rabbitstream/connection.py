"""One stream-protocol connection, sans-IO: RabbitMQ's stream protocol (port 5552) given its
meaning in Leveret's core. The asyncio adapter (``server/connection.py``'s
``ConnectionProtocol``, made with this front end) feeds it bytes and writes what it produces.

Theory of operation (``deps/rabbitmq_stream/docs/PROTOCOL.adoc``): the client sends
peer-properties, sasl-handshake, sasl-authenticate; the server then sends tune, the client
answers tune and sends open (its vhost); from then on the commands of ``_HANDLERS`` run
(``ACCEPTED`` is the table of what each state takes; anything else closes the connection
with unknown-frame, as does a frame the codec refuses). Each command is checked the way
RabbitMQ's stream plugin checks it, in its order, and answered with its response codes:

- publishers (declare / delete / query sequence): a declared publisher needs write access
  to its stream; its reference (if any) is the de-duplication key, the same state as the
  ``x-stream-producer`` header: a publishing id at most the highest stored for the
  reference is confirmed without being stored again. ``publish`` appends a frame's osiris
  entries as they came (no re-encoding), as one batch; the ids published in one read are
  confirmed together once what they wrote is on disk (``Journal.after_commit``, group commit).
- subscriptions (subscribe / credit / unsubscribe): read access; the offset specification
  becomes the core's ``OffsetSpec``; a ``ChunkConsumer`` takes whole committed chunks,
  each one credit, and each goes out as a ``deliver`` prefix plus the chunk's stored bytes
  (two pieces for ``writelines``; nothing is decoded). Single active consumer groups are in
  ``state.py`` (for a super stream's partitions too: the ``super-stream`` property).
- super streams (route / partitions / create / delete): ``superstream.py``, on the core's
  exchanges, bindings and stream queues.
- offsets (store / query): kept by the stream's log under the reference, durably.
- streams (create / delete / metadata / stream stats): configure access for create and
  delete; a stream is a stream queue of the core, the same one 0-9-1 sees.
- heartbeat (``tick``): a heartbeat when nothing was sent for ``heartbeat`` seconds, and
  the connection dropped after two silent intervals; close in both directions.

Login: SASL PLAIN (and the broker's other mechanisms) through ``auth.authn.login``, vhost
access through ``Access.open``; a refusal is answered after
``FAILURE_DELAY``, as every front end does.
"""

from __future__ import annotations

import logging
from enum import Enum, auto
from typing import TYPE_CHECKING, Any, ClassVar

from leveret.auth import authn
from leveret.auth.access import Access
from leveret.errors import AccessRefused, AMQPError, NotAllowed, PreconditionFailed
from leveret.model.queues.stream import ChunkConsumer, ChunkOwner, OffsetSpec, StreamQueue
from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.codec import Role, StreamCodec
from leveret.protocol.rabbitstream.constants import Code, Key, OffsetType
from leveret.protocol.rabbitstream.errors import StreamProtocolError
from leveret.server.rabbitstream import superstream

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from leveret.model.broker import Client
    from leveret.model.consumer import Consumer
    from leveret.model.queues.stream_log import StoredChunk
    from leveret.model.vhost import VirtualHost
    from leveret.server.rabbitstream.state import StreamServer

log = logging.getLogger("leveret.connection")

# Pending output (bytes) above which no more chunks are handed to this connection until it
# is flushed, so a deep stream is never read into memory all at once.
OUTPUT_HIGH_WATER = 1 << 20
# Frames handled per turn before the adapter lets other connections run.
TURN_FRAMES = 300
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
SERVER_PROPERTIES = {
    # Stream clients gate features on the RabbitMQ version the server names (the Node.js
    # client needs one at all): 3.12 is the newest whose stream protocol Leveret offers
    # whole (3.13 adds filtering, which it does not).
    "version": "3.12.0",
    "leveret": "stream protocol",
    "product": "Leveret",
    "platform": "Python",
    "copyright": "Leveret authors",
    "information": "Licensed under the MPL 2.0",
}
# Stream creation arguments -> the queue arguments of a stream queue.
CREATE_ARGUMENTS = {
    "max-length-bytes": "x-max-length-bytes",
    "max-age": "x-max-age",
    "stream-max-segment-size-bytes": "x-stream-max-segment-size-bytes",
    "initial-cluster-size": "x-initial-cluster-size",
    "queue-leader-locator": "x-queue-leader-locator",
}
_NUMERIC = frozenset(
    ("x-max-length-bytes", "x-stream-max-segment-size-bytes", "x-initial-cluster-size")
)
_OFFSET_KINDS = {
    OffsetType.FIRST: "first",
    OffsetType.LAST: "last",
    OffsetType.NEXT: "next",
    OffsetType.OFFSET: "offset",
    OffsetType.TIMESTAMP: "timestamp",
}


class State(Enum):
    PEER_PROPERTIES = auto()
    SASL = auto()
    AUTHENTICATING = auto()  # a login refused: waiting out the delay before the answer
    TUNE = auto()
    OPEN = auto()
    RUNNING = auto()
    CLOSING = auto()  # we sent close: waiting for its response
    CLOSED = auto()


# Which client commands each state takes (heartbeats are taken in every state but CLOSED).
ACCEPTED: dict[State, frozenset[int]] = {
    State.PEER_PROPERTIES: frozenset({Key.PEER_PROPERTIES}),
    State.SASL: frozenset({Key.SASL_HANDSHAKE, Key.SASL_AUTHENTICATE}),
    State.AUTHENTICATING: frozenset(),
    State.TUNE: frozenset({Key.TUNE}),
    State.OPEN: frozenset({Key.OPEN}),
    State.RUNNING: frozenset(
        {
            Key.DECLARE_PUBLISHER,
            Key.PUBLISH,
            Key.QUERY_PUBLISHER_SEQUENCE,
            Key.DELETE_PUBLISHER,
            Key.SUBSCRIBE,
            Key.CREDIT,
            Key.STORE_OFFSET,
            Key.QUERY_OFFSET,
            Key.UNSUBSCRIBE,
            Key.CREATE,
            Key.DELETE,
            Key.METADATA,
            Key.ROUTE,
            Key.PARTITIONS,
            Key.EXCHANGE_COMMAND_VERSIONS,
            Key.STREAM_STATS,
            Key.CREATE_SUPER_STREAM,
            Key.DELETE_SUPER_STREAM,
            Key.CONSUMER_UPDATE,  # the response to ours
        }
    ),
    State.CLOSING: frozenset(),
    State.CLOSED: frozenset(),
}


def _code_of(exc: AMQPError) -> int:
    """A core error as the stream protocol's response code."""
    if isinstance(exc, AccessRefused):
        return Code.ACCESS_REFUSED
    if isinstance(exc, PreconditionFailed):
        return Code.PRECONDITION_FAILED
    return Code.INTERNAL_ERROR


class Publisher:
    __slots__ = ("id", "pending", "queue", "reference", "stream")

    def __init__(self, pid: int, reference: str, stream: str, queue: StreamQueue) -> None:
        self.id = pid
        self.reference = reference
        self.stream = stream
        self.queue = queue
        self.pending: list[int] = []  # ids published this read, confirmed together


class Subscription:
    """One subscription id of this connection (a ``state.Member`` when in a group)."""

    __slots__ = ("conn", "consumer", "credit", "group", "id", "queue", "spec", "stream")

    def __init__(
        self,
        conn: StreamConnection,
        sid: int,
        stream: str,
        queue: StreamQueue,
        spec: OffsetSpec,
        credit: int,
        group: str,
    ) -> None:
        self.conn = conn
        self.id = sid
        self.stream = stream
        self.queue = queue
        self.spec = spec
        self.credit = credit  # credit given before the consumer was attached
        self.group = group  # single active consumer group name ("" = none)
        self.consumer: ChunkConsumer | None = None

    def activate(self) -> None:
        self.conn._activate(self)

    def deactivate(self) -> None:
        self.conn._deactivate(self)


class _Attachment:
    """What closes with the model's ``Client``: this connection's consumers."""

    def __init__(self, conn: StreamConnection) -> None:
        self.conn = conn

    def close(self) -> None:
        self.conn._drop_all()

    def set_writable(self, writable: bool) -> None:
        self.conn.set_writable(writable)


class StreamConnection:
    """The server side of one stream-protocol connection; see the module docstring."""

    TURN_FRAMES: ClassVar[int] = TURN_FRAMES

    def __init__(
        self,
        server: StreamServer,
        *,
        peer: str,
        loopback: bool,
        now: float,
        certificate_identity: str | None = None,
    ) -> None:
        self.server = server
        self.broker = server.broker
        self.users = server.users
        self.peer = peer
        self.loopback = loopback
        self.certificate_identity = certificate_identity
        self.codec = StreamCodec(Role.SERVER)
        self.state = State.PEER_PROPERTIES
        self.opened_at = now
        self.on_output: Callable[[], None] | None = None
        self.client: Client | None = None
        self.access: Access | None = None
        self.vhost: VirtualHost | None = None
        self.user = ""
        self.published = False
        self.paced = False
        self.blocked = False
        self.heartbeat = 0
        self.frame_max = 0
        self.should_close_transport = False
        self.close_reason = ""
        self._out: list[bytes] = []
        self._out_size = 0
        self._writable = True
        self._backlog: list[c.Command] = []  # commands read but not handled yet (turns)
        self._last_received = now
        self._last_sent = now
        self._now = now
        self._hold_until = 0.0  # a refused login: answer only after the delay
        self._close_deadline = 0.0
        self._correlation = 0
        self._publishers: dict[int, Publisher] = {}
        self._subscriptions: dict[int, Subscription] = {}
        # consumer update correlation -> (subscription, whether it was told it is active)
        self._updates: dict[int, tuple[Subscription, bool]] = {}
        self._deliver_v2 = False
        self._by_consumer: dict[ChunkConsumer, Subscription] = {}
        self._owner = ChunkOwner(self._deliver_chunk, self._consumer_removed)
        server.connections.add(self)

    # -- the adapter's surface (``server.frontend.FrontEnd``) ------------------------------

    @property
    def pending(self) -> bool:
        return bool(self._backlog)

    def data_received(self, data: bytes, now: float) -> None:
        self._last_received = self._now = now
        if self.state is State.CLOSED or self.should_close_transport:
            return
        try:
            commands = self.codec.receive(data)
        except StreamProtocolError as exc:
            self._fatal(exc.code, str(exc))
            return
        self._backlog.extend(commands)
        self.run_turn()

    def run_turn(self) -> None:
        backlog = self._backlog
        n = min(len(backlog), self.TURN_FRAMES)
        batch, self._backlog = backlog[:n], backlog[n:]
        for command in batch:
            if self.state is State.CLOSED or self.should_close_transport:
                self._backlog = []
                break
            self._handle(command)
        self._confirm_published()

    def take_output(self, now: float) -> list[bytes]:
        if self._hold_until and now < self._hold_until:
            return []
        if self._hold_until:
            self._hold_until = 0.0
            self.should_close_transport = True
        out, self._out = self._out, []
        self._out_size = 0
        if out:
            self._last_sent = now
            if not self._owner.writable and self._writable:
                self._resume()
        return out

    def next_tick(self, now: float) -> float | None:
        """When ``tick`` next has something to do (``server/frontend_contract.py``): the
        adapter sleeps until then. ``_hold_until`` is only set while input is handled, after
        which the adapter asks again."""
        if self.state is State.CLOSED:
            return None
        if self._hold_until:
            return self._hold_until
        if self.state is State.CLOSING:
            return self._close_deadline
        if self.state is not State.RUNNING:
            return self.opened_at + HANDSHAKE_TIMEOUT + 1e-3
        if not self.heartbeat:
            return None
        return min(
            self._last_sent + self.heartbeat / 2,
            self._last_received + 2 * self.heartbeat + 1e-3,
        )

    def tick(self, now: float) -> None:
        if self.state is State.CLOSED:
            return
        if self._hold_until:
            if now >= self._hold_until and self.on_output is not None:
                self.on_output()
            return
        if self.state is State.CLOSING:
            if now >= self._close_deadline:
                self.should_close_transport = True
            return
        if self.state is not State.RUNNING:
            if now - self.opened_at > HANDSHAKE_TIMEOUT:
                self.close_reason = "handshake timeout"
                self.should_close_transport = True
            return
        if self.heartbeat:
            if now - self._last_received > 2 * self.heartbeat:
                self.close_reason = "missed heartbeats from client"
                self.should_close_transport = True
                return
            if now - self._last_sent >= self.heartbeat / 2:
                self._send(c.Heartbeat())
                self._last_sent = now

    def set_writable(self, writable: bool) -> None:
        self._writable = writable
        if writable:
            self._resume()
        else:
            self._owner.writable = False

    def block(self, reason: str) -> None:
        # The stream protocol has no blocked notification: the adapter stops reading.
        self.blocked = True

    def unblock(self, now: float) -> None:
        self.blocked = False

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the broker's side (shutdown, vhost deleted)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        if self.state is not State.RUNNING:
            self.should_close_transport = True
            return
        self._correlation += 1
        self._send(c.Close(self._correlation, Code.OK, reply_text))
        self.close_reason = reply_text
        self.state = State.CLOSING
        self._close_deadline = now + CLOSE_TIMEOUT

    def connection_lost(self) -> None:
        self.state = State.CLOSED
        self._drop_all()
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.access is not None:
            self.access.close()
            self.access = None
        self.server.connections.discard(self)

    # -- output --------------------------------------------------------------------------

    def _send(self, command: c.Command) -> None:
        frame = command.encode()
        self._out.append(frame)
        self._out_size += len(frame)
        self._notify()

    def _notify(self) -> None:
        if self.on_output is not None:
            self.on_output()

    def _fatal(self, code: int, reason: str) -> None:
        """Close at once with ``code``: the peer broke the protocol."""
        log.info("stream connection %s: closing: %s", self.peer, reason)
        self.close_reason = reason
        if self.state is State.RUNNING:
            self._correlation += 1
            self._send(c.Close(self._correlation, code, reason))
        self.state = State.CLOSED
        self.should_close_transport = True
        self._backlog = []

    # -- dispatch --------------------------------------------------------------------------

    def _handle(self, command: c.Command) -> None:
        key = command.KEY if not isinstance(command, c.Response) else 0x8000 | command.key
        if isinstance(command, c.Heartbeat):
            return
        if isinstance(command, c.Close):
            self._send(c.Response(Key.CLOSE, command.correlation_id, Code.OK))
            self.close_reason = f"client closed: {command.reason}"
            self.state = State.CLOSED
            self.should_close_transport = True
            return
        if isinstance(command, c.Response) and command.key == Key.CLOSE:
            if self.state is State.CLOSING:
                self.state = State.CLOSED
                self.should_close_transport = True
            return
        base = key & 0x7FFF
        if base not in ACCEPTED[self.state]:
            self._fatal(Code.UNKNOWN_FRAME, f"command 0x{key:04x} not expected now")
            return
        handler = _HANDLERS.get(type(command))
        if handler is None:
            self._fatal(Code.UNKNOWN_FRAME, f"command 0x{key:04x} is not handled")
            return
        handler(self, command)

    # -- connection set-up --------------------------------------------------------------------

    def _peer_properties(self, command: c.PeerProperties) -> None:
        self._send(c.PeerPropertiesResponse(command.correlation_id, Code.OK, SERVER_PROPERTIES))
        self.state = State.SASL

    def _sasl_handshake(self, command: c.SaslHandshake) -> None:
        mechanisms = authn.mechanisms(self.users, certificate_identity=self.certificate_identity)
        self._send(c.SaslHandshakeResponse(command.correlation_id, Code.OK, mechanisms))

    def _sasl_authenticate(self, command: c.SaslAuthenticate) -> None:
        login = authn.login(
            self.users,
            command.mechanism,
            command.data or b"",
            loopback=self.loopback,
            peer=self.peer,
            certificate_identity=self.certificate_identity,
        )
        if login.ok:
            assert login.user is not None
            self.user = login.user.name
            self._send(c.SaslAuthenticateResponse(command.correlation_id, Code.OK))
            self._send(c.Tune(self.server.settings.frame_max, self.server.settings.heartbeat))
            self.state = State.TUNE
            return
        mechanisms = authn.mechanisms(self.users, certificate_identity=self.certificate_identity)
        if command.mechanism not in mechanisms:
            code = Code.SASL_MECHANISM_NOT_SUPPORTED
        elif login.refusal is authn.Refusal.LOOPBACK_ONLY:
            code = Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK
        elif login.refusal is authn.Refusal.MALFORMED:
            code = Code.SASL_ERROR
        else:
            code = Code.AUTHENTICATION_FAILURE
        self.close_reason = f"login refused ({login.refusal.value if login.refusal else ''})"
        self._send(c.SaslAuthenticateResponse(command.correlation_id, code))
        self.state = State.AUTHENTICATING
        if login.delay:
            # The answer goes out only after the delay every refused login gets.
            self._hold_until = self._now + login.delay
        else:
            self.should_close_transport = True

    def _tune(self, command: c.Tune) -> None:
        offered = self.server.settings
        self.frame_max = _negotiate(offered.frame_max, command.frame_max)
        self.heartbeat = _negotiate(offered.heartbeat, command.heartbeat)
        self.codec.frame_max = self.frame_max
        self.state = State.OPEN

    def _open(self, command: c.Open) -> None:
        name = command.virtual_host or "/"
        user = self.users.users.get(self.user)
        try:
            if user is None:
                raise NotAllowed(f"user '{self.user}' is gone")
            self.access = Access.open(self.users, user, name, peer=self.peer)
            vhost = self.broker.vhosts.get(name)
            if vhost is None:
                raise NotAllowed(f"vhost {name} not found")
        except AMQPError as exc:
            log.info("stream connection %s: open refused: %s", self.peer, exc)
            self._send(c.OpenResponse(command.correlation_id, Code.VIRTUAL_HOST_ACCESS_FAILURE))
            self.close_reason = str(exc)
            self.state = State.CLOSED
            self.should_close_transport = True
            return
        self.vhost = vhost
        self.client = self.broker.connect(vhost, self.user, self.peer)
        self.client.attach(0, _Attachment(self))
        settings = self.server.settings
        properties = {"advertised_host": settings.host, "advertised_port": str(settings.port)}
        self._send(c.OpenResponse(command.correlation_id, Code.OK, properties))
        self.state = State.RUNNING
        log.info("stream connection %s: user '%s' opened vhost '%s'", self.peer, self.user, name)

    # -- streams ---------------------------------------------------------------------------

    def _stream(self, name: str) -> StreamQueue | None:
        assert self.vhost is not None
        queue = self.vhost.queues.get(name)
        return queue if isinstance(queue, StreamQueue) and not queue.deleted else None

    def _check(self, kind: str, name: str) -> int:
        """Code.OK, or ACCESS_REFUSED when the user may not ``kind`` the stream ``name``."""
        assert self.access is not None
        if self.access.allowed(kind, "queue", name):  # type: ignore[arg-type]
            return Code.OK
        return Code.ACCESS_REFUSED

    def _create(self, command: c.Create) -> None:
        cid, name = command.correlation_id, command.stream
        code = self._check("configure", name)
        if code != Code.OK:
            self._send(c.Response(Key.CREATE, cid, code))
            return
        arguments = {"x-queue-type": "stream", **stream_queue_arguments(command.arguments)}
        assert self.vhost is not None
        assert self.access is not None
        existing = self.vhost.queues.get(name)
        try:
            if existing is None:
                self.access.check_queue_limit(name, len(self.vhost.queues))
            self.vhost.declare_queue(name, owner=self, durable=True, arguments=arguments)
        except AMQPError as exc:
            self._send(c.Response(Key.CREATE, cid, _code_of(exc)))
            return
        code = Code.STREAM_ALREADY_EXISTS if existing is not None else Code.OK
        self._send(c.Response(Key.CREATE, cid, code))

    def _delete(self, command: c.Delete) -> None:
        cid, name = command.correlation_id, command.stream
        code = self._check("configure", name)
        if code == Code.OK:
            queue = self._stream(name)
            if queue is None:
                code = Code.STREAM_DOES_NOT_EXIST
            else:
                assert self.vhost is not None
                self.vhost.remove_queue(queue)
                streams_gone(self.server, [queue])
        self._send(c.Response(Key.DELETE, cid, code))

    def _stream_gone(self, queue: StreamQueue) -> None:
        """``queue`` was deleted: its publishers here are told (metadata update)."""
        gone = [p for p in self._publishers.values() if p.queue is queue]
        subscribed = [s for s in self._subscriptions.values() if s.queue is queue]
        for publisher in gone:
            del self._publishers[publisher.id]
        for sub in subscribed:
            self._unsubscribe_quietly(sub)
        if gone or subscribed:
            self._send(c.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, queue.name))

    def _metadata(self, command: c.Metadata) -> None:
        settings = self.server.settings
        entries = []
        for name in command.streams:
            if self._stream(name) is None:
                entries.append(c.StreamMetadata(name, Code.STREAM_DOES_NOT_EXIST, 0xFFFF, []))
            else:
                entries.append(c.StreamMetadata(name, Code.OK, 0, []))
        brokers = [c.Broker(0, settings.host, settings.port)]
        self._send(c.MetadataResponse(command.correlation_id, brokers, entries))

    def _stream_stats(self, command: c.StreamStats) -> None:
        queue = self._stream(command.stream)
        code: int = (
            Code.STREAM_DOES_NOT_EXIST if queue is None else self._check("read", command.stream)
        )
        if code != Code.OK or queue is None:
            self._send(c.StreamStatsResponse(command.correlation_id, code, {}))
            return
        stream_log = queue.log
        committed = stream_log.last_chunk_offset
        stats = {
            "first_chunk_id": stream_log.first_offset,
            "committed_chunk_id": committed if committed < stream_log.next_offset else -1,
        }
        if stream_log.next_offset == stream_log.first_offset:
            stats["first_chunk_id"] = -1
        self._send(c.StreamStatsResponse(command.correlation_id, Code.OK, stats))

    def _exchange_command_versions(self, command: c.ExchangeCommandVersions) -> None:
        ours = [c.CommandVersion(key, low, high) for key, (low, high) in c.VERSIONS.items()]
        for theirs in command.commands:
            if theirs.key == Key.DELIVER and theirs.max_version >= 2:
                self._deliver_v2 = True
        self._send(c.ExchangeCommandVersionsResponse(command.correlation_id, Code.OK, ours))

    # -- publishing --------------------------------------------------------------------------

    def _declare_publisher(self, command: c.DeclarePublisher) -> None:
        cid, stream = command.correlation_id, command.stream
        reference = command.reference or ""
        queue = self._stream(stream)
        code: int = Code.STREAM_DOES_NOT_EXIST if queue is None else self._check("write", stream)
        if code == Code.OK and command.publisher_id in self._publishers:
            code = Code.PRECONDITION_FAILED
        if code == Code.OK and reference:
            for other in self._publishers.values():
                if other.reference == reference and other.stream == stream:
                    code = Code.PRECONDITION_FAILED  # RabbitMQ: one reference per stream
        if code == Code.OK and queue is not None:
            self._publishers[command.publisher_id] = Publisher(
                command.publisher_id, reference, stream, queue
            )
        self._send(c.Response(Key.DECLARE_PUBLISHER, cid, code))

    def _delete_publisher(self, command: c.DeletePublisher) -> None:
        publisher = self._publishers.pop(command.publisher_id, None)
        code = Code.OK if publisher is not None else Code.PUBLISHER_DOES_NOT_EXIST
        self._send(c.Response(Key.DELETE_PUBLISHER, command.correlation_id, code))

    def _query_publisher_sequence(self, command: c.QueryPublisherSequence) -> None:
        queue = self._stream(command.stream)
        if queue is None:
            response = c.QueryPublisherSequenceResponse(
                command.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0
            )
        else:
            sequence = queue.log.producers.get(command.reference, 0) if command.reference else 0
            response = c.QueryPublisherSequenceResponse(command.correlation_id, Code.OK, sequence)
        self._send(response)

    def _publish(self, command: c.Publish) -> None:
        ids = command.ids
        publisher = self._publishers.get(command.publisher_id)
        if publisher is None:
            errors = [(pid, int(Code.PUBLISHER_DOES_NOT_EXIST)) for pid in ids]
            self._send(c.PublishError(command.publisher_id, errors))
            return
        queue = publisher.queue
        if queue.deleted:
            errors = [(pid, int(Code.STREAM_DOES_NOT_EXIST)) for pid in ids]
            self._send(c.PublishError(command.publisher_id, errors))
            return
        if not ids:
            return
        # The frame's entries as one batch: one append, one chunk piece, one checksum.
        queue.append_entries(command.entries, command.counts, publisher.reference, ids)
        publisher.pending.extend(ids)
        self.published = True

    def _confirm_published(self) -> None:
        """Confirm what was published in this turn once the store has it (one callback per
        publisher per turn; the journal keeps callbacks in order)."""
        journal = self.broker.journal
        for publisher in self._publishers.values():
            if not publisher.pending:
                continue
            ids, publisher.pending = publisher.pending, []
            journal.after_commit(self._confirmer(publisher.id, ids))

    def _confirmer(self, pid: int, ids: list[int]) -> Callable[[], None]:
        def confirm() -> None:
            if self.state is not State.CLOSED:
                self._send(c.PublishConfirm(pid, ids))

        return confirm

    # -- consuming ---------------------------------------------------------------------------

    def _subscribe(self, command: c.Subscribe) -> None:
        cid, sid, stream = command.correlation_id, command.subscription_id, command.stream
        queue = self._stream(stream)
        code: int
        if sid in self._subscriptions:
            code = Code.SUBSCRIPTION_ID_ALREADY_EXISTS
        elif queue is None:
            code = Code.STREAM_DOES_NOT_EXIST
        else:
            code = self._check("read", stream)
        spec = _offset_spec(command.offset_type, command.offset)
        if code == Code.OK and spec is None:
            code = Code.PRECONDITION_FAILED
        properties = command.properties
        single = properties.get("single-active-consumer", "false") == "true"
        group = properties.get("name", "") if single else ""
        if code == Code.OK and single and not group:
            code = Code.PRECONDITION_FAILED  # RabbitMQ: a single active consumer needs a name
        if code != Code.OK or queue is None or spec is None:
            self._send(c.Response(Key.SUBSCRIBE, cid, code))
            return
        sub = Subscription(self, sid, stream, queue, spec, command.credit, group)
        self._subscriptions[sid] = sub
        self._send(c.Response(Key.SUBSCRIBE, cid, Code.OK))
        if group:
            assert self.vhost is not None
            partition = superstream.partition_of(self.vhost, stream, properties)
            self.server.join(self.vhost.name, stream, group, sub, partition)
        else:
            self._attach(sub)

    def _attach(self, sub: Subscription, spec: OffsetSpec | None = None) -> None:
        """``spec``: where to start instead of the subscription's own (an activation's)."""
        consumer = ChunkConsumer(
            f"stream-{sub.id}", sub.queue, self._owner, spec=spec or sub.spec, credit=sub.credit
        )
        sub.consumer = consumer
        self._by_consumer[consumer] = sub
        sub.queue.add_consumer(consumer)

    def _activate(self, sub: Subscription) -> None:
        """``sub`` became its group's active consumer: ask the client where to start."""
        self._correlation += 1
        self._updates[self._correlation] = (sub, True)
        self._send(c.ConsumerUpdate(self._correlation, sub.id, True))

    def _deactivate(self, sub: Subscription) -> None:
        """``sub`` must step down (a super stream's group rebalances): it stops taking
        chunks now; the group moves on once the client has answered."""
        self._detach(sub)
        self._correlation += 1
        self._updates[self._correlation] = (sub, False)
        self._send(c.ConsumerUpdate(self._correlation, sub.id, False))

    def _consumer_update_response(self, command: c.ConsumerUpdateResponse) -> None:
        sub, active = self._updates.pop(command.correlation_id, (None, False))
        if sub is None or self._subscriptions.get(sub.id) is not sub or sub.consumer is not None:
            return
        assert self.vhost is not None
        if not active:
            self.server.stepped_down(self.vhost.name, sub.stream, sub.group, sub)
            return
        if not self.server.is_active(self.vhost.name, sub.stream, sub.group, sub):
            return  # asked to step down before it answered: it stays detached
        none = command.offset_type == OffsetType.NONE
        # The subscription keeps its own spec for a later activation (as RabbitMQ's does).
        self._attach(sub, None if none else _offset_spec(command.offset_type, command.offset))

    def _credit(self, command: c.Credit) -> None:
        sub = self._subscriptions.get(command.subscription_id)
        if sub is None:
            self._send(
                c.CreditResponse(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, command.subscription_id)
            )
            return
        consumer = sub.consumer
        if consumer is None:
            sub.credit += command.credit
            return
        consumer.credit += command.credit
        if self._owner.writable:
            sub.queue.dispatch()

    def _unsubscribe(self, command: c.Unsubscribe) -> None:
        sub = self._subscriptions.get(command.subscription_id)
        if sub is None:
            code = Code.SUBSCRIPTION_ID_DOES_NOT_EXIST
        else:
            code = Code.OK
            self._unsubscribe_quietly(sub)
        self._send(c.Response(Key.UNSUBSCRIBE, command.correlation_id, code))

    def _unsubscribe_quietly(self, sub: Subscription) -> None:
        self._subscriptions.pop(sub.id, None)
        self._detach(sub)
        if sub.group and self.vhost is not None:
            self.server.leave(self.vhost.name, sub.stream, sub.group, sub)

    def _detach(self, sub: Subscription) -> None:
        if sub.consumer is not None:
            sub.credit = max(sub.consumer.credit, 0)  # kept should it be attached again
            self._by_consumer.pop(sub.consumer, None)
            sub.queue.remove_consumer(sub.consumer)
            sub.consumer = None

    def _deliver_chunk(self, consumer: ChunkConsumer, chunk: StoredChunk) -> None:
        sub = self._by_consumer[consumer]
        data = chunk.data
        committed = sub.queue.log.last_chunk_offset if self._deliver_v2 else None
        self._out.append(c.deliver_prefix(sub.id, len(data), committed))
        self._out.append(data)
        self._out_size += len(data) + 13
        consumer.credit -= 1
        if self._out_size > OUTPUT_HIGH_WATER:
            self._owner.writable = False
        self._notify()

    def _consumer_removed(self, consumer: Consumer) -> None:
        """The stream was deleted (by any protocol): the subscription ends."""
        sub = self._by_consumer.pop(consumer, None)  # type: ignore[call-overload]
        if sub is not None:
            sub.consumer = None
            self._stream_gone(sub.queue)

    def _resume(self) -> None:
        """The socket drained: hand chunks again."""
        if self._owner.writable or not self._writable:
            return
        self._owner.writable = True
        for sub in list(self._subscriptions.values()):
            if sub.consumer is not None and not sub.queue.deleted:
                sub.queue.dispatch()
                if not self._owner.writable:
                    return

    def _drop_all(self) -> None:
        for sub in list(self._subscriptions.values()):
            self._unsubscribe_quietly(sub)
        self._publishers.clear()

    # -- offsets ---------------------------------------------------------------------------

    def _store_offset(self, command: c.StoreOffset) -> None:
        queue = self._stream(command.stream)
        if queue is None or not command.reference:
            return  # no response exists for store offset: nothing to tell
        if self._check("read", command.stream) != Code.OK:
            return
        queue.log.store_offset(command.reference, command.offset)

    def _query_offset(self, command: c.QueryOffset) -> None:
        queue = self._stream(command.stream)
        if queue is None:
            code, offset = Code.STREAM_DOES_NOT_EXIST, 0
        else:
            stored = queue.log.offsets.get(command.reference)
            code, offset = (Code.NO_OFFSET, 0) if stored is None else (Code.OK, stored)
        self._send(c.QueryOffsetResponse(command.correlation_id, code, offset))

    # -- super streams (superstream.py) ---------------------------------------------------

    def _route(self, command: c.Route) -> None:
        assert self.vhost is not None
        self._send(superstream.route(self.vhost, command))

    def _partitions(self, command: c.Partitions) -> None:
        assert self.vhost is not None
        self._send(superstream.partitions(self.vhost, command))

    def _create_super_stream(self, command: c.CreateSuperStream) -> None:
        assert self.vhost is not None
        assert self.access is not None
        arguments = stream_queue_arguments(command.arguments)
        try:
            code = superstream.create(self.vhost, self.access, self, command, arguments)
        except AMQPError as exc:
            code = _code_of(exc)
        self._send(c.Response(Key.CREATE_SUPER_STREAM, command.correlation_id, code))

    def _delete_super_stream(self, command: c.DeleteSuperStream) -> None:
        assert self.vhost is not None
        assert self.access is not None
        gone: list[StreamQueue] = []
        try:
            code, gone = superstream.delete(self.vhost, self.access, command)
        except AMQPError as exc:
            code = _code_of(exc)
        self._send(c.Response(Key.DELETE_SUPER_STREAM, command.correlation_id, code))
        streams_gone(self.server, gone)


def streams_gone(server: StreamServer, queues: Sequence[StreamQueue]) -> None:
    """``queues`` were deleted (by any means): their publishers and subscribers on every
    stream-protocol connection are told (metadata update)."""
    for conn in list(server.connections):
        if isinstance(conn, StreamConnection):
            for queue in queues:
                conn._stream_gone(queue)


def stream_queue_arguments(arguments: Mapping[str, str]) -> dict[str, object]:
    """Stream creation arguments as the queue arguments of a stream queue."""
    converted: dict[str, object] = {}
    for key, value in arguments.items():
        target = CREATE_ARGUMENTS.get(key)
        if target is None:
            continue  # RabbitMQ accepts (and ignores) arguments it does not know
        converted[target] = int(value) if target in _NUMERIC and value.isdigit() else value
    return converted


def _negotiate(ours: int, theirs: int) -> int:
    """The smaller of two limits where 0 means none."""
    if not ours:
        return theirs
    if not theirs:
        return ours
    return min(ours, theirs)


def _offset_spec(offset_type: int, offset: int) -> OffsetSpec | None:
    kind = _OFFSET_KINDS.get(offset_type)  # type: ignore[call-overload]
    if kind is None:
        return None
    if kind in ("offset", "timestamp"):
        return OffsetSpec(kind, max(offset, 0) if kind == "offset" else offset)
    return OffsetSpec(kind)


_HANDLERS: dict[type[c.Command], Callable[[StreamConnection, Any], None]] = {
    c.PeerProperties: StreamConnection._peer_properties,
    c.SaslHandshake: StreamConnection._sasl_handshake,
    c.SaslAuthenticate: StreamConnection._sasl_authenticate,
    c.Tune: StreamConnection._tune,
    c.Open: StreamConnection._open,
    c.DeclarePublisher: StreamConnection._declare_publisher,
    c.Publish: StreamConnection._publish,
    c.QueryPublisherSequence: StreamConnection._query_publisher_sequence,
    c.DeletePublisher: StreamConnection._delete_publisher,
    c.Subscribe: StreamConnection._subscribe,
    c.Credit: StreamConnection._credit,
    c.StoreOffset: StreamConnection._store_offset,
    c.QueryOffset: StreamConnection._query_offset,
    c.Unsubscribe: StreamConnection._unsubscribe,
    c.ConsumerUpdateResponse: StreamConnection._consumer_update_response,
    c.Create: StreamConnection._create,
    c.Delete: StreamConnection._delete,
    c.Metadata: StreamConnection._metadata,
    c.StreamStats: StreamConnection._stream_stats,
    c.ExchangeCommandVersions: StreamConnection._exchange_command_versions,
    c.Route: StreamConnection._route,
    c.Partitions: StreamConnection._partitions,
    c.CreateSuperStream: StreamConnection._create_super_stream,
    c.DeleteSuperStream: StreamConnection._delete_super_stream,
}
