"""One stream-protocol connection's meaning in Leveret's core: the broker's front end for
RabbitMQ's stream protocol (port 5552), a ``FrontEnd`` of the connection's shell.

The protocol's server machine is ``protocol/rabbitstream/server.py`` (set-up, the states and
what each takes, close in both directions, the codec's errors); the shell
(``server/shell/``) owns the lifecycle every protocol shares: the handshake deadline, the
delay of a refused login, the vhost's open through ``Access``, heartbeats (the machine has
none of its own), turns of ``TURN_COMMANDS``, output pacing and the model clock. What is
left here is what each command means, checked the way RabbitMQ's stream plugin checks it,
in its order, and answered with its response codes:

- publishers (declare / delete / query sequence): a declared publisher needs write access
  to its stream; its reference (if any) is the de-duplication key, the same state as the
  ``x-stream-producer`` header: a publishing id at most the highest stored for the
  reference is confirmed without being stored again. ``publish`` appends a frame's osiris
  entries as they came (no re-encoding), as one batch; the ids published in one turn are
  confirmed together once what they wrote is on disk (``Journal.after_commit``, group
  commit).
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

Login: SASL through ``Shell.login`` (the broker's mechanisms); a refusal is answered after
its delay with RabbitMQ's code for its reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from leveret.auth import authn
from leveret.auth.access import OpenRefused
from leveret.errors import AccessRefused, AMQPError, PreconditionFailed
from leveret.model.completion import Completion
from leveret.model.queues.remote import RemoteQueue
from leveret.model.queues.stream import ChunkConsumer, ChunkOwner, OffsetSpec, StreamQueue
from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.constants import Code, Key, OffsetType
from leveret.protocol.rabbitstream.server import (
    OUTPUT_HIGH_WATER,
    Closed,
    LoginRequested,
    OpenRequested,
    ServerConfig,
    ServerConnection,
    Tuned,
)
from leveret.server.rabbitstream import superstream

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.auth.authn import Login
    from leveret.model.broker import Client
    from leveret.model.consumer import Consumer
    from leveret.model.queues.stream_log import StoredChunk
    from leveret.model.vhost import VirtualHost
    from leveret.server.rabbitstream.state import StreamServer
    from leveret.server.shell.info import ChannelInfo
    from leveret.server.shell.shell import Shell

log = logging.getLogger("leveret.connection")

# Commands handled per turn before the other connections run.
TURN_COMMANDS: Final = 300
PACED_TURN_COMMANDS: Final = 30
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
        self.pending: list[int] = []  # ids published this turn, confirmed together


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
        """The shell tells the connection itself (``writable_changed``)."""


class StreamConnection:
    """The broker's side of one stream-protocol connection; see the module docstring."""

    protocol = "stream"
    turn_budget = TURN_COMMANDS
    paced_turn_budget = PACED_TURN_COMMANDS
    output_high_water = OUTPUT_HIGH_WATER
    reads_when_blocked = False

    def __init__(self, server: StreamServer, shell: Shell) -> None:
        self.server = server
        self.shell = shell
        self.broker = server.broker
        self.users = server.users
        self.peer = shell.peer
        settings = server.settings
        self.machine = ServerConnection(
            ServerConfig(
                properties=SERVER_PROPERTIES,
                mechanisms=tuple(
                    authn.mechanisms(shell.users, certificate_identity=shell.certificate_identity)
                ),
                frame_max=settings.frame_max,
                heartbeat=settings.heartbeat,
            ),
            shell.output,
        )
        self.vhost: VirtualHost | None = None
        self.should_close_transport = False
        self.close_reason = ""
        self.held_size = 0
        self._hold_all = False
        self._publishers: dict[int, Publisher] = {}
        self._subscriptions: dict[int, Subscription] = {}
        # consumer update correlation -> (subscription, whether it was told it is active)
        self._updates: dict[int, tuple[Subscription, bool]] = {}
        self._deliver_v2 = False
        self._by_consumer: dict[ChunkConsumer, Subscription] = {}
        self._owner = ChunkOwner(self._deliver_chunk, self._consumer_removed)
        server.connections.add(self)

    @property
    def client(self) -> Client | None:
        return self.shell.client

    # -- FrontEnd (server/shell/contract.py) -------------------------------------------------

    @property
    def pending(self) -> bool:
        return self.machine.pending and not self._hold_all

    def receive(self, data: bytes, now: float) -> None:
        closed = self.machine.receive_data(data)
        if closed is not None:
            self._closed(closed)

    def run(self, budget: int, now: float) -> None:
        machine = self.machine
        for _ in range(budget):
            if self._hold_all or self.should_close_transport:
                break
            event = machine.next_event()
            if event is None:
                break
            handler = _HANDLERS.get(type(event))
            if handler is not None:
                handler(self, event)
            elif isinstance(event, Closed):
                self._closed(event)
            else:
                machine.fail(Code.UNKNOWN_FRAME, f"{type(event).__name__} is not handled")
                self._closed(Closed(Code.UNKNOWN_FRAME, "unhandled command", by_peer=False))
        self._confirm_published()

    def take_output(self, now: float) -> list[bytes]:
        return self.shell.output.take()

    def next_tick(self, now: float) -> float | None:
        """The machine has no timers: heartbeats and time-outs are the shell's."""
        return None

    def tick(self, now: float) -> None:
        """See ``next_tick``."""

    def writable_changed(self, writable: bool) -> None:
        if writable:
            self._resume()
        else:
            self._owner.writable = False

    def notify_blocked(self, reason: str) -> None:
        """The stream protocol has no blocked notification: the connection is only not read."""

    def notify_unblocked(self, now: float) -> None:
        """See ``notify_blocked``."""

    def hold_input(self, channel: int | None) -> bool:
        if channel is not None:
            return False  # the stream protocol has no channels: the connection is held
        self._hold_all = True
        return True

    def release_input(self, channel: int | None) -> None:
        self._hold_all = False

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the broker's side (shutdown, vhost deleted)."""
        self.close_reason = reply_text
        self.machine.close(Code.OK, reply_text)
        if self.machine.finished:
            self.should_close_transport = True
        self._release()

    def internal_error(self, now: float) -> None:
        self._closed(self.machine.fail(Code.INTERNAL_ERROR, "internal error; see the broker log"))

    def connection_lost(self) -> None:
        self.machine.finished = True
        self._release()
        self.server.connections.discard(self)

    def channel_infos(self) -> list[ChannelInfo]:
        """RabbitMQ counts no channels on a stream connection."""
        return []

    # -- the connection's set-up -----------------------------------------------------------

    def _closed(self, event: Closed) -> None:
        if not self.close_reason:
            self.close_reason = event.reason
        if event.code not in (Code.OK,) and not event.by_peer:
            log.info("stream connection %s: closing: %s", self.peer, event.reason)
        self.should_close_transport = True
        self._release()

    def _release(self) -> None:
        self._drop_all()
        self.shell.release()

    def _login(self, event: LoginRequested) -> None:
        shell = self.shell
        login = shell.login(event.mechanism, event.data)
        if login.ok:
            shell.info.client_properties = self.machine.client_properties
            self.machine.accept_login()
            return
        code = self._refusal_code(event.mechanism, login)
        self.close_reason = f"login refused ({login.refusal.value if login.refusal else ''})"
        # The answer goes out only after the delay every refused login gets.
        shell.refuse(login.delay, lambda: self._refuse_login(code))

    def _refusal_code(self, mechanism: str, login: Login) -> int:
        mechanisms = authn.mechanisms(
            self.users, certificate_identity=self.shell.certificate_identity
        )
        if mechanism not in mechanisms:
            return Code.SASL_MECHANISM_NOT_SUPPORTED
        if login.refusal is authn.Refusal.LOOPBACK_ONLY:
            return Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK
        if login.refusal is authn.Refusal.MALFORMED:
            return Code.SASL_ERROR
        return Code.AUTHENTICATION_FAILURE

    def _refuse_login(self, code: int) -> None:
        self.machine.refuse_login(code)
        self.should_close_transport = True

    def _tuned(self, event: Tuned) -> None:
        info = self.shell.info
        info.frame_max = event.frame_max
        info.timeout = event.heartbeat
        self.shell.keep_alive(event.heartbeat, c.Heartbeat().encode())

    def _open(self, event: OpenRequested) -> None:
        name = event.virtual_host
        try:
            client = self.shell.open_vhost(name)
        except OpenRefused as exc:
            log.info("stream connection %s: open refused: %s", self.peer, exc.reply_text)
            self.close_reason = exc.reply_text
            self.machine.refuse_open(Code.VIRTUAL_HOST_ACCESS_FAILURE)
            self.should_close_transport = True
            return
        self.vhost = client.vhost
        client.attach(0, _Attachment(self))
        settings = self.server.settings
        port = self._advertised_port()
        properties = {"advertised_host": settings.host, "advertised_port": str(port)}
        self.machine.accept_open(properties)
        log.info("stream connection %s: user '%s' opened vhost '%s'", self.peer, client.user, name)

    def _advertised_port(self) -> int:
        """The port this client is told (open, metadata): over TLS, the TLS listener's
        (RabbitMQ's ``tls_port``), so a client that follows it dials TLS where TLS is."""
        settings = self.server.settings
        return settings.tls_port if self.shell.info.ssl else settings.port

    def _send(self, command: c.Command) -> None:
        self.machine.send(command)

    # -- streams ---------------------------------------------------------------------------

    def _stream(self, name: str) -> StreamQueue | None:
        assert self.vhost is not None
        queue = self.vhost.queues.get(name)
        return queue if isinstance(queue, StreamQueue) and not queue.deleted else None

    def _check(self, kind: str, name: str) -> int:
        """Code.OK, or ACCESS_REFUSED when the user may not ``kind`` the stream ``name``."""
        access = self.shell.access
        assert access is not None
        if access.allowed(kind, "queue", name):  # type: ignore[arg-type]
            return Code.OK
        return Code.ACCESS_REFUSED

    def _create(self, command: c.Create) -> None:
        cid, name = command.correlation_id, command.stream
        code = self._check("configure", name)
        if code != Code.OK:
            self._send(c.Response(Key.CREATE, cid, code))
            return
        arguments = {"x-queue-type": "stream", **stream_queue_arguments(command.arguments)}
        vhost = self.vhost
        assert vhost is not None
        access = self.shell.access
        assert access is not None
        # find_queue: on a cluster node, a stream led by another node is its proxy here.
        existing = vhost.find_queue(name)
        written = None
        try:
            if existing is None:
                access.check_queue_limit(name, len(vhost.queues))
                if vhost.shared is not None:
                    # On a cluster node, into etcd first: of two nodes creating the same
                    # stream at once, one is answered OK, the other that it exists.
                    written = vhost.shared.declare_queue(
                        name,
                        generated_name=name,
                        owner=self,
                        durable=True,
                        exclusive=False,
                        auto_delete=False,
                        arguments=arguments,
                    )
        except AMQPError as exc:
            self._send(c.Response(Key.CREATE, cid, _code_of(exc)))
            return
        if written is None:
            self._declare_stream(cid, name, arguments, made=existing is None)
            return
        self.shell.defer(
            written, lambda done: self._declare_stream(cid, name, arguments, made=done)
        )

    def _declare_stream(
        self, cid: int, name: str, arguments: dict[str, object], made: bool | Completion[bool]
    ) -> None:
        """The model's declaration of stream ``name`` (on a cluster node, once etcd holds
        it: ``made`` says whether this connection's create made the record)."""
        assert self.vhost is not None
        try:
            if isinstance(made, Completion):
                made = made.result()
            self.vhost.declare_queue(name, owner=self, durable=True, arguments=arguments)
        except AMQPError as exc:
            self._send(c.Response(Key.CREATE, cid, _code_of(exc)))
            return
        self._send(c.Response(Key.CREATE, cid, Code.OK if made else Code.STREAM_ALREADY_EXISTS))

    def _delete(self, command: c.Delete) -> None:
        cid, name = command.correlation_id, command.stream
        code = self._check("configure", name)
        if code == Code.OK:
            queue = self._stream(name)
            if queue is None:
                elsewhere = self._delete_elsewhere(cid, name)
                if elsewhere is None:
                    return
                code = elsewhere
            else:
                assert self.vhost is not None
                shared = self.vhost.shared
                written = shared.delete_queue(queue) if shared is not None else None
                if written is not None:
                    # On a cluster node: answered once etcd and this node's model have lost
                    # it; the model's removal told every connection's clients (this one's
                    # too, before the response, as on one node).
                    self.shell.defer(written, lambda done: self._stream_deleted(cid, done))
                    return
                # The model's removal tells every connection's clients (StreamServer).
                self.vhost.remove_queue(queue)
        self._send(c.Response(Key.DELETE, cid, code))

    def _delete_elsewhere(self, cid: int, name: str) -> int | None:
        """Delete stream ``name`` when another node of the cluster leads it (its proxy
        here), as RabbitMQ deletes a stream from any node: through etcd, answered once
        etcd, this node and the leader have lost it (None: the answer comes then); else the
        response code (no such stream, or its leader is down)."""
        assert self.vhost is not None
        proxy = self.vhost.find_queue(name)
        shared = self.vhost.shared
        if not isinstance(proxy, RemoteQueue) or proxy.type.name != "stream" or shared is None:
            return Code.STREAM_DOES_NOT_EXIST
        if not proxy.leader.up:
            return Code.STREAM_NOT_AVAILABLE
        written = shared.delete_queue(proxy)
        if written is None:
            return Code.STREAM_DOES_NOT_EXIST  # etcd's record went just now
        # No client of this node publishes to it or reads it through the proxy (they go to
        # its leader; a replica's readers are told by replication when the record goes).
        self.shell.defer(written, lambda done: self._stream_deleted(cid, done))
        return None

    def _stream_deleted(self, cid: int, written: Completion[None]) -> None:
        try:
            written.result()
        except AMQPError as exc:
            self._send(c.Response(Key.DELETE, cid, _code_of(exc)))
            return
        self._send(c.Response(Key.DELETE, cid, Code.OK))

    def stream_gone(self, queue: StreamQueue) -> None:
        """``queue`` was removed from the model (``StreamServer``, for every removal; a
        subscription's consumer, ``_consumer_removed``): its publishers and subscribers
        here are told (metadata update), once."""
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
        leader_of = self.server.stream_leader
        assert self.vhost is not None
        entries = []
        # Over TLS, every node is named by its TLS listener, as RabbitMQ 3.10 does (its
        # tls_port on each node; the host stays the advertised one).
        tls = self.shell.info.ssl
        brokers = [c.Broker(0, settings.host, self._advertised_port())]
        others: dict[str, int] = {}  # node -> its reference in brokers
        replicas_of = self.server.stream_replicas

        def refer(node: str, host: str, port: int) -> int:
            if not node:
                return 0  # this node
            reference = others.get(node)
            if reference is None:
                reference = others[node] = len(brokers)
                brokers.append(c.Broker(reference, host, port))
            return reference

        for name in command.streams:
            if self._stream(name) is not None:
                leader = 0
            else:
                # A stream another node of the cluster leads: named with that node's stream
                # listener, as RabbitMQ names the leader's, so the client connects there.
                led = leader_of(self.vhost.name, name, tls) if leader_of is not None else None
                if led is None:
                    entries.append(c.StreamMetadata(name, Code.STREAM_DOES_NOT_EXIST, 0xFFFF, []))
                    continue
                leader = refer(*led)
            # A replicated stream's replicas, as RabbitMQ lists them: RabbitMQ's clients
            # subscribe there, and a replica's node reads from its copy (``stream_reader``).
            replicas = [
                refer(*replica)
                for replica in (replicas_of(self.vhost.name, name, tls) if replicas_of else [])
            ]
            entries.append(c.StreamMetadata(name, Code.OK, leader, replicas))
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
        gate = queue.gate() if queue.gate is not None else None
        if gate is None:
            publisher.pending.extend(ids)
        else:
            # A replicated stream (cluster/stream_replication.py): confirmed once committed
            # on its in-sync followers too.
            gate.on_done(lambda done: self._committed(publisher.id, ids, done))
        self.shell.published = True

    def _committed(self, pid: int, ids: list[int], done: Completion[bool]) -> None:
        if self.machine.finished:
            return
        if done.error is None and done.result():
            self.broker.journal.after_commit(self._confirmer(pid, ids))
        else:
            errors = [(i, int(Code.STREAM_NOT_AVAILABLE)) for i in ids]
            self._send(c.PublishError(pid, errors))

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
            if not self.machine.finished:
                self._send(c.PublishConfirm(pid, ids))

        return confirm

    # -- consuming ---------------------------------------------------------------------------

    def _subscribe(self, command: c.Subscribe) -> None:
        cid, sid, stream = command.correlation_id, command.subscription_id, command.stream
        queue = self._stream(stream)
        reader = self.server.stream_reader
        if queue is None and reader is not None:
            assert self.vhost is not None
            queue = reader(self.vhost.name, stream)  # a replica here: read from its copy
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
        correlation = self.machine.next_correlation()
        self._updates[correlation] = (sub, True)
        self._send(c.ConsumerUpdate(correlation, sub.id, True))

    def _deactivate(self, sub: Subscription) -> None:
        """``sub`` must step down (a super stream's group rebalances): it stops taking
        chunks now; the group moves on once the client has answered."""
        self._detach(sub)
        correlation = self.machine.next_correlation()
        self._updates[correlation] = (sub, False)
        self._send(c.ConsumerUpdate(correlation, sub.id, False))

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
        committed = sub.queue.log.last_chunk_offset if self._deliver_v2 else None
        consumer.credit -= 1
        # Past the output's high-water mark the shell stops the chunks (writable_changed).
        self.machine.deliver(sub.id, chunk.data, committed)

    def _consumer_removed(self, consumer: Consumer) -> None:
        """The stream was deleted (by any protocol): the subscription ends."""
        sub = self._by_consumer.pop(consumer, None)  # type: ignore[call-overload]
        if sub is not None:
            sub.consumer = None
            self.stream_gone(sub.queue)

    def _resume(self) -> None:
        """The socket drained: hand chunks again."""
        if self._owner.writable or not self.shell.writable:
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
        if not command.reference:
            return  # no response exists for store offset: nothing to tell
        queue = self._stream(command.stream)
        remote = None if queue is not None else self._led_elsewhere(command.stream)
        if (queue is None and remote is None) or self._check("read", command.stream) != Code.OK:
            return
        if queue is not None:
            queue.log.store_offset(command.reference, command.offset)
        elif remote is not None:
            remote.store_offset(command.reference, command.offset)  # its leader keeps it

    def _query_offset(self, command: c.QueryOffset) -> None:
        cid = command.correlation_id
        queue = self._stream(command.stream)
        if queue is None:
            remote = self._led_elsewhere(command.stream)
            if remote is not None:
                asked = remote.query_offset(command.reference)
                self.shell.defer(asked, lambda done: self._queried(cid, done))
                return
            code, offset = Code.STREAM_DOES_NOT_EXIST, 0
        else:
            stored = queue.log.offsets.get(command.reference)
            code, offset = (Code.NO_OFFSET, 0) if stored is None else (Code.OK, stored)
        self._send(c.QueryOffsetResponse(cid, code, offset))

    def _queried(self, cid: int, done: Completion[int | None]) -> None:
        """The leader's answer to a query_offset through this node (RabbitMQ asks the
        stream's leader too); its node unreachable: the stream is not available."""
        if done.error is not None:
            code, offset = Code.STREAM_NOT_AVAILABLE, 0
        else:
            stored = done.result()
            code, offset = (Code.NO_OFFSET, 0) if stored is None else (Code.OK, stored)
        self._send(c.QueryOffsetResponse(cid, code, offset))

    def _led_elsewhere(self, name: str) -> RemoteQueue | None:
        """Stream ``name`` led by another node of the cluster (its proxy here)."""
        assert self.vhost is not None
        queue = self.vhost.remote_queues.get(name)
        if isinstance(queue, RemoteQueue) and queue.type.name == "stream":
            return queue if not queue.deleted else None
        return None

    # -- super streams (superstream.py) ---------------------------------------------------

    def _route(self, command: c.Route) -> None:
        assert self.vhost is not None
        self._send(superstream.route(self.vhost, command))

    def _partitions(self, command: c.Partitions) -> None:
        assert self.vhost is not None
        self._send(superstream.partitions(self.vhost, command))

    def _create_super_stream(self, command: c.CreateSuperStream) -> None:
        assert self.vhost is not None
        access = self.shell.access
        assert access is not None
        arguments = stream_queue_arguments(command.arguments)
        cid = command.correlation_id
        try:
            code = superstream.create(self.vhost, access, self, command, arguments)
        except AMQPError as exc:
            code = _code_of(exc)
        if isinstance(code, int):
            self._send(c.Response(Key.CREATE_SUPER_STREAM, cid, code))
            return
        # On a cluster node: answered once etcd has it and this node's copy too.
        self.shell.defer(code, lambda written: self._super_stream_created(cid, written))

    def _super_stream_created(self, cid: int, written: Completion[bool]) -> None:
        try:
            code = superstream.code_of(written)
        except AMQPError as exc:
            code = _code_of(exc)
        self._send(c.Response(Key.CREATE_SUPER_STREAM, cid, code))

    def _delete_super_stream(self, command: c.DeleteSuperStream) -> None:
        assert self.vhost is not None
        access = self.shell.access
        assert access is not None
        cid = command.correlation_id
        try:
            code = superstream.delete(self.vhost, access, command)
        except AMQPError as exc:
            code = _code_of(exc)
        if not isinstance(code, int):
            # On a cluster node: answered once etcd and this node's copy have lost it (the
            # model's removal of the partitions told their clients, as on one node).
            self.shell.defer(code, lambda done: self._super_stream_deleted(cid, done))
            return
        self._send(c.Response(Key.DELETE_SUPER_STREAM, cid, code))

    def _super_stream_deleted(self, cid: int, written: Completion[None]) -> None:
        try:
            code = superstream.deleted_code(written)
        except AMQPError as exc:
            code = _code_of(exc)
        self._send(c.Response(Key.DELETE_SUPER_STREAM, cid, code))


def stream_queue_arguments(arguments: Mapping[str, str]) -> dict[str, object]:
    """Stream creation arguments as the queue arguments of a stream queue."""
    converted: dict[str, object] = {}
    for key, value in arguments.items():
        target = CREATE_ARGUMENTS.get(key)
        if target is None:
            continue  # RabbitMQ accepts (and ignores) arguments it does not know
        converted[target] = int(value) if target in _NUMERIC and value.isdigit() else value
    return converted


def _offset_spec(offset_type: int, offset: int) -> OffsetSpec | None:
    kind = _OFFSET_KINDS.get(offset_type)  # type: ignore[call-overload]
    if kind is None:
        return None
    if kind in ("offset", "timestamp"):
        return OffsetSpec(kind, max(offset, 0) if kind == "offset" else offset)
    return OffsetSpec(kind)


_HANDLERS: dict[type[Any], Callable[[StreamConnection, Any], None]] = {
    LoginRequested: StreamConnection._login,
    Tuned: StreamConnection._tuned,
    OpenRequested: StreamConnection._open,
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
