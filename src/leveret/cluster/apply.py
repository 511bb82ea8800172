"""What etcd holds, applied to this node's own copy: the model (exchanges, the queues this
node leads, bindings, policies), the auth registry, the runtime parameters, and a view of
the rest of the cluster (nodes, queues led elsewhere and their bindings).

:class:`Applier` keeps every key it has seen with its revisions and applies a change only
if it is newer than what it has for that key (deletes leave a tombstone with their
revision), so a change can reach it twice, or early (a node applies its own writes as soon
as etcd accepts them, before its watch reports them), and the result is still what
applying etcd's changes in revision order gives. A change that needs something not there
yet (a binding before its queue, a queue before its vhost) waits in ``pending`` and is
applied when that arrives. The model keeps reading its own copy: nothing here is on the
per-message path. Synchronous and free of I/O; ``cluster/metadata.py`` feeds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.auth.definitions import load_store
from leveret.auth.users import AdminError
from leveret.cluster.keys import AUTH_SECTIONS, Layout, decode, decode_arguments
from leveret.errors import AMQPError
from leveret.model.consumer import CallbackOwner
from leveret.model.policies import PolicyError, make_policy
from leveret.model.queues.base import EVERY_MESSAGE_STORE
from leveret.model.queues.stream import ChunkConsumer, OffsetSpec, StreamConsumer, StreamQueue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from leveret.auth.users import UserStore
    from leveret.cluster.etcd import KeyValue
    from leveret.model.broker import Broker
    from leveret.model.consumer import Consumer
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.parameters import Runtime

log = logging.getLogger("leveret.cluster")


@dataclass(frozen=True, slots=True)
class Entry:
    create_revision: int
    mod_revision: int
    value: Any


@dataclass(frozen=True, slots=True)
class QueueRecord:
    vhost: str
    name: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict[str, object]
    leader: str
    owner: str | None = None
    # A replicated queue's members (the leader among them), the leader's epoch and the
    # in-sync set (docs/cluster.md, "Replicated queues"); () for a queue of one node.
    members: tuple[str, ...] = ()
    epoch: int = 0
    in_sync: tuple[str, ...] = ()

    @classmethod
    def from_value(cls, vhost: str, name: str, value: dict[str, Any]) -> QueueRecord:
        return cls(
            vhost,
            name,
            bool(value.get("durable", True)),
            bool(value.get("auto_delete", False)),
            bool(value.get("exclusive", False)),
            decode_arguments(value.get("arguments")),
            str(value.get("leader", "")),
            value.get("owner"),
            tuple(str(m) for m in value.get("members", ())),
            int(value.get("epoch", 0)),
            tuple(str(m) for m in value.get("in_sync", ())),
        )

    @property
    def replicated(self) -> bool:
        return len(self.members) > 1


@dataclass(frozen=True, slots=True)
class BindingRecord:
    vhost: str
    source: str
    destination: str
    dest_kind: str  # "queue" or "exchange"
    routing_key: str
    arguments: dict[str, object]

    @classmethod
    def from_value(cls, vhost: str, value: dict[str, Any]) -> BindingRecord:
        return cls(
            vhost,
            str(value["source"]),
            str(value["destination"]),
            "exchange" if value.get("kind") == "exchange" else "queue",
            str(value.get("routing_key", "")),
            decode_arguments(value.get("arguments")),
        )


@dataclass
class View:
    """What this node knows of the rest of the cluster."""

    # Running nodes (those whose lease is alive) and their records.
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Nodes that joined and were not forgotten.
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every queue of the cluster, by (vhost, name).
    queues: dict[tuple[str, str], QueueRecord] = field(default_factory=dict)
    # Bindings whose destination is a queue led by another node (the inter-node link
    # will route to them), by their key.
    remote_bindings: dict[bytes, BindingRecord] = field(default_factory=dict)

    def cluster_address(
        self, node: str, overrides: Mapping[str, tuple[str, int]]
    ) -> tuple[str, int] | None:
        """Where to reach ``node``'s inter-node port: the setting's override for it (a
        proxy of the fault harness, a NAT), else the address in its record; None while
        it is not running."""
        if node in overrides:
            return overrides[node]
        record = self.nodes.get(node)
        address = record.get("cluster") if record is not None else None
        if not isinstance(address, str):
            return None
        host, _, port = address.rpartition(":")
        return (host.strip("[]"), int(port)) if port.isdigit() else None

    def stream_address(self, node: str, *, tls: bool = False) -> tuple[str, int] | None:
        """Where ``node``'s stream-protocol listener is reached: its record's ``stream``
        (its ``stream_advertised_host``/``_port``), else its first ``rabbitmq-stream://``
        listener; a wildcard host is the host of its inter-node address. With ``tls``
        (for a client that came over TLS), its TLS one: the record's ``stream_tls``, else
        its first ``rabbitmq-stream+tls://`` listener, else (a node with no TLS listener,
        or an older record) the plain one. None while it is not running or has none."""
        if tls:
            found = self._stream_listener(node, "rabbitmq-stream+tls://", "stream_tls")
            if found is not None:
                return found
        return self._stream_listener(node, "rabbitmq-stream://", "stream")

    def _stream_listener(self, node: str, prefix: str, field_: str) -> tuple[str, int] | None:
        record = self.nodes.get(node)
        listeners = record.get("listeners") if record is not None else None
        advertised = record.get(field_) if record is not None else None
        candidates = [f"{prefix}{advertised}"] if isinstance(advertised, str) else []
        candidates += listeners if isinstance(listeners, list) else []
        for url in candidates:
            if not isinstance(url, str) or not url.startswith(prefix):
                continue
            host, _, port = url[len(prefix) :].rpartition(":")
            host = host.strip("[]")
            if not port.isdigit():
                continue
            if host in ("", "0.0.0.0", "::"):
                peer = self.cluster_address(node, {})
                if peer is None:
                    continue
                host = peer[0]
            return host, int(port)
        return None

    def leaders(self) -> dict[str, int]:
        """Queues led by each member node (0 for a member leading none)."""
        counts = dict.fromkeys(self.members, 0)
        for record in self.queues.values():
            counts[record.leader] = counts.get(record.leader, 0) + 1
        return counts


_UNREADABLE = object()


def _decoded(kv: KeyValue) -> Any:
    """A key's JSON value; a value that is not JSON is no key of ours (left alone)."""
    try:
        return decode(kv.value)
    except ValueError:
        log.warning("ignoring %s in etcd: its value is not JSON", kv.key.decode(errors="replace"))
        return _UNREADABLE


class Missing(Exception):
    """A change needs something the copy does not have yet."""


@dataclass
class Applier:
    """Applies etcd's keys to one node's copy (see the module docstring)."""

    layout: Layout
    node: str
    broker: Broker
    users: UserStore
    runtime: Runtime
    view: View = field(default_factory=View)
    # The revision up to which every change has been applied (the watch resumes after it).
    revision: int = 0
    entries: dict[bytes, Entry] = field(default_factory=dict)
    tombstones: dict[bytes, int] = field(default_factory=dict)
    # The revision of the last full read (changes at or before it are in it).
    floor: int = 0
    pending: set[bytes] = field(default_factory=set)
    # Called with a vhost's name when it leaves the registry (the server closes its
    # connections first); by default its contents go through the model.
    on_vhost_deleted: Callable[[str], None] | None = None
    # Called after the auth registry or the runtime parameters changed (the node saves its
    # local files).
    on_auth_changed: Callable[[], None] | None = None
    on_runtime_changed: Callable[[], None] | None = None
    # Makes the proxy of a queue led by another node (``cluster/link.py``): with it, such
    # queues and their bindings are in the model (``VirtualHost.remote_queues``); without,
    # they are in the view only (``View.remote_bindings``).
    make_remote: Callable[[VirtualHost, QueueRecord], Queue] | None = None
    # Called with every queue record applied or removed (None: removed).
    on_queue_record: Callable[[tuple[str, str], QueueRecord | None], None] | None = None
    # Called with the name of each node whose record (it runs) is applied, and of each
    # whose record went (its lease expired, or it stopped).
    on_node_running: Callable[[str], None] | None = None
    on_node_gone: Callable[[str], None] | None = None
    # True while this applier changes the model: removals it makes are not news to etcd.
    applying: bool = False
    # The create revision of the etcd record each local queue came from: its incarnation
    # (a queue deleted and declared again has a new one). The node keeps it in its data
    # directory, so a restart knows which incarnation its stored messages belong to.
    incarnations: dict[tuple[str, str], int] = field(default_factory=dict)
    # Called once per batch of changes that changed ``incarnations``, before any message
    # can reach a queue it made (the node saves them).
    on_incarnations_changed: Callable[[], None] | None = None
    _incarnations_dirty: bool = False
    # Bindings this copy's model holds, by key (what a delete must undo).
    _applied_bindings: dict[bytes, BindingRecord] = field(default_factory=dict)
    # What a cluster node sets on each vhost it adds (``cluster/node.py`` supplies it).
    prepare: Callable[[VirtualHost], None] | None = None
    _auth_dirty: bool = False
    _runtime_dirty: bool = False

    # -- feeding it ----------------------------------------------------------------------

    def load_snapshot(self, kvs: Iterable[KeyValue], revision: int) -> None:
        """Make the copy what etcd held at ``revision`` (a full read: at boot, after a
        compaction, after a partition): keys it no longer has are deleted."""
        kvs = list(kvs)
        seen = {kv.key for kv in kvs}
        changes: list[tuple[bytes, int, int, Any]] = [
            (kv.key, kv.create_revision, kv.mod_revision, _decoded(kv)) for kv in kvs
        ]
        changes += [(key, 0, revision, None) for key in self.entries if key not in seen]
        self.tombstones = {k: r for k, r in self.tombstones.items() if r > revision}
        self._apply_all(changes, force=True)
        self.revision = max(self.revision, revision)
        # The read holds every change up to ``revision``: one reported later is stale.
        self.floor = max(self.floor, revision)

    def apply_events(self, events: Iterable[tuple[bool, KeyValue]], revision: int) -> None:
        """Changes a watch reported, in its order; ``revision``: applied up to it."""
        self._apply_all(
            [
                (kv.key, kv.create_revision, kv.mod_revision, None if deleted else _decoded(kv))
                for deleted, kv in events
            ]
        )
        self.revision = max(self.revision, revision)

    def apply_written(
        self, puts: Iterable[tuple[bytes, bytes]], deletes: Iterable[bytes], revision: int
    ) -> None:
        """This node's own transaction, accepted by etcd at ``revision``: applied now, so
        that whoever asked sees it (the watch reports it again later: a no-op then).
        ``deletes``: keys, or key prefixes ending in ``/`` (every key below)."""
        changes: list[tuple[bytes, int, int, Any]] = []
        for key, value in puts:
            old = self.entries.get(key)
            create = old.create_revision if old is not None else revision
            changes.append((key, create, revision, decode(value)))
        for key in deletes:
            if key.endswith(b"/"):
                changes += [(k, 0, revision, None) for k in self.entries if k.startswith(key)]
            else:
                changes.append((key, 0, revision, None))
        self._apply_all(changes)

    def _apply_all(
        self, changes: list[tuple[bytes, int, int, Any]], *, force: bool = False
    ) -> None:
        touched: list[bytes] = []
        for key, create, mod, value in changes:
            if value is _UNREADABLE:
                continue
            if self._newer(key, mod, force=force):
                old = self.entries.get(key)
                if value is None:
                    self.entries.pop(key, None)
                    self.tombstones[key] = mod
                    if old is not None:
                        touched.append(key)
                else:
                    self.tombstones.pop(key, None)
                    self.entries[key] = Entry(create, mod, value)
                    touched.append(key)
        self.applying = True
        try:
            for key in touched:
                self._apply_key(key)
            # The registry first (a vhost that arrived lets its contents in), then what waits.
            self._flush()
            self._retry_pending()
            self._flush()
            if self._incarnations_dirty and self.on_incarnations_changed is not None:
                self._incarnations_dirty = False
                self.on_incarnations_changed()
        finally:
            self.applying = False

    def _newer(self, key: bytes, mod: int, *, force: bool) -> bool:
        if mod <= self.floor and not force:
            return False
        known = self.entries.get(key)
        if known is not None and known.mod_revision > mod:
            return False
        if known is not None and known.mod_revision == mod and not force:
            return False
        dead = self.tombstones.get(key)
        return dead is None or dead < mod

    def reapply(self, keys: Iterable[bytes]) -> None:
        """Apply these keys again as the copy holds them (a queue this node's directory held
        that another node leads now: its proxy and the bindings to it, once the local copy
        has gone)."""
        self.applying = True
        try:
            for key in keys:
                self._apply_key(key)
        finally:
            self.applying = False
        self._flush()

    # -- one key -------------------------------------------------------------------------

    def _apply_key(self, key: bytes) -> None:
        path = self.layout.parse(key)
        if path is None:
            return
        entry = self.entries.get(key)
        value = entry.value if entry is not None else None
        try:
            if path.area == "auth":
                self._auth_dirty = True
            elif path.area == "runtime":
                self._runtime_dirty = True
            elif path.area == "nodes":
                self._table(self.view.nodes, path.section, value)
                if value is not None and self.on_node_running is not None:
                    self.on_node_running(path.section)
                elif value is None and self.on_node_gone is not None:
                    self.on_node_gone(path.section)
            elif path.area == "members":
                self._table(self.view.members, path.section, value)
            elif path.area == "entities" and len(path.names) >= 2:
                vhost = path.names[0]
                if path.section == "exchanges":
                    self._exchange(key, vhost, path.names[1], value)
                elif path.section == "queues":
                    self._queue(key, vhost, path.names[1], entry)
                elif path.section == "bindings":
                    self._binding(key, vhost, value)
        except Missing:
            self.pending.add(key)
        except (AMQPError, KeyError, ValueError, TypeError) as exc:
            # A record this node's model refuses (it cannot happen through the writers,
            # which validate with the same model first): logged, never fatal.
            log.warning("cannot apply %s from etcd: %s", key.decode(errors="replace"), exc)
        else:
            self.pending.discard(key)

    @staticmethod
    def _table(table: dict[str, dict[str, Any]], name: str, value: Any) -> None:
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value if isinstance(value, dict) else {}

    def _vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise Missing(name)
        return vhost

    def _exchange(self, key: bytes, vhost_name: str, name: str, value: Any) -> None:
        if value is None:
            vhost = self.broker.vhosts.get(vhost_name)
            if vhost is not None and name in vhost.exchanges:
                vhost.delete_exchange(name)
                self._repend(vhost_name)
            self.pending.discard(key)
            return
        vhost = self._vhost(vhost_name)
        arguments = decode_arguments(value.get("arguments"))
        existing = vhost.exchanges.get(name)
        if existing is not None:
            same = (
                existing.type_name == value["type"]
                and existing.durable == bool(value.get("durable", True))
                and existing.auto_delete == bool(value.get("auto_delete", False))
                and existing.internal == bool(value.get("internal", False))
                and dict(existing.arguments) == arguments
            )
            if same:
                return
            vhost.delete_exchange(name)
        vhost.declare_exchange(
            name,
            str(value["type"]),
            durable=bool(value.get("durable", True)),
            auto_delete=bool(value.get("auto_delete", False)),
            internal=bool(value.get("internal", False)),
            arguments=arguments,
        )
        self._repend(vhost_name)

    def _queue(self, key: bytes, vhost_name: str, name: str, entry: Entry | None) -> None:
        ident = (vhost_name, name)
        vhost = self.broker.vhosts.get(vhost_name)
        local = vhost.find_queue(name) if vhost is not None else None
        if entry is None:
            self.view.queues.pop(ident, None)
            if self.incarnations.pop(ident, None) is not None:
                self._incarnations_dirty = True
            if vhost is not None and local is not None:
                vhost.remove_queue(local)
            self._drop_remote_bindings(vhost_name, name)
            self.pending.discard(key)
            if self.on_queue_record is not None:
                self.on_queue_record(ident, None)
            return
        record = QueueRecord.from_value(vhost_name, name, entry.value)
        if record.leader != self.node:
            before = self.view.queues.get(ident)
            self.view.queues[ident] = record
            was_replicated = before is not None and before.replicated
            led_it = was_replicated and before is not None and before.leader == self.node
            kept: list[Consumer] = []
            if (
                vhost is not None
                and local is not None
                and not local.forwards
                and (record.replicated or was_replicated)
                and (self.node in record.members or led_it)
            ):
                # A replicated queue this node led and another member was elected to lead
                # (this node lost its lease), or that an operator removed this node from
                # (cluster/members.py): its copy here is no longer the queue.
                log.warning("queue '%s' in '%s': now led by '%s'", name, vhost_name, record.leader)
                # This node's clients' consumers follow the queue to its new leader. Peers'
                # consumers (through the inter-node link) stay behind: each peer's proxy
                # follows the record itself and cancels them here, and moved into this
                # node's proxy they would feed the peer the new leader's messages a second
                # way round.
                kept = [c for c in local.consumers if not isinstance(c.owner, CallbackOwner)]
                for reader in [c for c in kept if isinstance(c, StreamConsumer)]:
                    if isinstance(reader, ChunkConsumer):
                        # A stream-protocol subscription is told its stream moved (its
                        # client asks the metadata again and subscribes where it is).
                        kept.remove(reader)
                        reader.owner.consumer_removed(reader)
                    else:
                        # A 0-9-1 or 1.0 reader resumes at the new leader where it was.
                        reader.spec = OffsetSpec("offset", reader.offset)
                local.consumers.clear()
                # Its removal purges it: from this node's journal only, never as an
                # operation of the queue's log (followers that have not yet applied this
                # record would take it from the deposed leader and lose their copy).
                local.store, local.gate = EVERY_MESSAGE_STORE, None
                vhost.remove_queue(local)
                local = None
            if self.make_remote is not None:
                self._proxy(self._vhost(vhost_name), record, local, kept)
            self._repend(vhost_name)
            if self.on_queue_record is not None:
                self.on_queue_record(ident, record)
            return
        vhost = self._vhost(vhost_name)
        moved: list[Consumer] = []
        if local is not None and local.forwards:
            # It was led elsewhere and is led here now.
            moved = self._take_consumers(local, record)
            vhost.remove_queue(local)
            local = None
        known = self.incarnations.get(ident)
        if local is not None and known is not None and known != entry.create_revision:
            # Deleted and declared again while this copy missed the delete (or this node
            # was down): the messages it holds are the old queue's, and go with it.
            log.info(
                "queue '%s' in '%s' was deleted and declared again meanwhile: its old messages go",
                name,
                vhost_name,
            )
            vhost.remove_queue(local)
            local = None
        if local is None:
            if record.exclusive:
                # Its connection was on this node: it existed before etcd had its record;
                # without it, the queue went with its connection (the node prunes it).
                self.view.queues[ident] = record
                return
            declare_recorded_queue(
                vhost,
                name,
                owner=None,
                durable=record.durable,
                auto_delete=record.auto_delete,
                arguments=record.arguments,
            )
        if known != entry.create_revision:
            self.incarnations[ident] = entry.create_revision
            self._incarnations_dirty = True
        self.view.queues[ident] = record
        self._repend(vhost_name)
        if self.on_queue_record is not None:
            self.on_queue_record(ident, record)
        if moved:
            queue = vhost.queues.get(name)
            for consumer in moved:
                if queue is None or (
                    isinstance(queue, StreamQueue) and not isinstance(consumer, StreamConsumer)
                ):
                    # (A stream's consumer through the old leader's proxy that is not a
                    # StreamConsumer, one with automatic acks, is cancelled: it has no
                    # offset to resume from. The others go on after the last offset they
                    # were given, RemoteQueue.consumer.)
                    consumer.owner.consumer_removed(consumer)
                    continue
                consumer.queue = queue
                try:
                    queue.add_consumer(consumer)
                except AMQPError:
                    consumer.owner.consumer_removed(consumer)

    def _proxy(
        self,
        vhost: VirtualHost,
        record: QueueRecord,
        local: Queue | None,
        kept: list[Consumer] | None = None,
    ) -> None:
        """Put the proxy of ``record``'s queue, led by another node, in ``vhost``."""
        assert self.make_remote is not None
        if local is not None and not local.forwards:
            # This node's model has a queue of that name that etcd does not say it leads
            # (a front end declared it here while another node's record won): it stays.
            log.warning(
                "queue '%s' in vhost '%s' is led by node '%s' but also held here",
                record.name,
                record.vhost,
                record.leader,
            )
            return
        if local is not None and self._proxy_matches(local, record):
            return
        moved = self._take_consumers(local, record) + (kept or [])
        proxy = self.make_remote(vhost, record)
        vhost.add_remote_queue(proxy)
        if moved:
            for consumer in moved:
                consumer.queue = proxy
                proxy.consumers.append(consumer)
            resume = getattr(getattr(proxy, "leader", None), "resume", None)
            if resume is not None:
                resume()

    @staticmethod
    def _take_consumers(local: Queue | None, record: QueueRecord) -> list[Consumer]:
        """The consumers of a replicated queue's old proxy, which follow the queue to its
        new leader (RabbitMQ's quorum queue consumers are not cancelled by a failover)."""
        if local is None or not local.forwards or not record.replicated:
            return []
        moved = list(local.consumers)
        local.consumers.clear()
        # Cancelled at the old leader (and what its link buffered for them goes back), or
        # the link to it would go on handing them what a deposed leader still sends.
        cancel = getattr(getattr(local, "leader", None), "cancel", None)
        if cancel is not None:
            for consumer in moved:
                cancel(local, consumer)
        return moved

    @staticmethod
    def _proxy_matches(queue: Queue, record: QueueRecord) -> bool:
        leader = getattr(queue, "leader", None)
        return (
            getattr(leader, "node", None) == record.leader
            and (queue.exclusive_owner is not None) == record.exclusive
            and queue.durable == record.durable
            and queue.auto_delete == record.auto_delete
            and dict(queue.arguments) == record.arguments
        )

    def _binding(self, key: bytes, vhost_name: str, value: Any) -> None:
        if value is None:
            record = self.view.remote_bindings.pop(key, None)
            self.pending.discard(key)
            if record is not None:
                return
            old = self._applied_bindings.pop(key, None)
            if old is not None:
                self._unbind(old)
            return
        record = BindingRecord.from_value(vhost_name, value)
        if self._applied_bindings.get(key) == record:
            return
        vhost = self._vhost(vhost_name)
        if record.source not in vhost.exchanges:
            raise Missing(record.source)
        if record.dest_kind == "exchange":
            if record.destination not in vhost.exchanges:
                raise Missing(record.destination)
            vhost.bind_exchange(
                record.destination, record.source, record.routing_key, record.arguments
            )
        else:
            queue = vhost.find_queue(record.destination)
            if queue is None:
                remote = self.view.queues.get((vhost_name, record.destination))
                if remote is None or remote.leader == self.node:
                    raise Missing(record.destination)
                self.view.remote_bindings[key] = record
                return
            vhost.bind_queue(
                record.destination,
                record.source,
                record.routing_key,
                record.arguments,
                owner=queue.exclusive_owner,
            )
        self._applied_bindings[key] = record

    def _unbind(self, record: BindingRecord) -> None:
        vhost = self.broker.vhosts.get(record.vhost)
        if vhost is None:
            return
        if record.dest_kind == "exchange":
            vhost.unbind_exchange(
                record.destination, record.source, record.routing_key, record.arguments
            )
            return
        queue = vhost.find_queue(record.destination)
        if queue is not None:
            vhost.unbind_queue(
                record.destination,
                record.source,
                record.routing_key,
                record.arguments,
                owner=queue.exclusive_owner,
            )

    def _drop_remote_bindings(self, vhost: str, queue: str) -> None:
        for key, record in list(self.view.remote_bindings.items()):
            if record.vhost == vhost and record.destination == queue:
                del self.view.remote_bindings[key]
                self.pending.add(key)

    def _repend(self, vhost: str) -> None:
        """Something of ``vhost`` appeared or went: the bindings of the vhost that the
        model no longer holds are tried again (those it holds stay)."""
        marker = self.layout.under("entities", "bindings", vhost)
        for key in self.entries:
            applied = key in self._applied_bindings or key in self.view.remote_bindings
            if key.startswith(marker) and not applied:
                self.pending.add(key)
        # A deleted exchange or queue took its bindings out of the model.
        model = self.broker.vhosts.get(vhost)
        for key, record in list(self._applied_bindings.items()):
            if record.vhost != vhost:
                continue
            if model is None or not self._in_model(model, record):
                del self._applied_bindings[key]
                if key in self.entries:
                    self.pending.add(key)

    @staticmethod
    def _in_model(vhost: VirtualHost, record: BindingRecord) -> bool:
        source = vhost.exchanges.get(record.source)
        if source is None:
            return False
        dest: Queue | Any = (
            vhost.exchanges.get(record.destination)
            if record.dest_kind == "exchange"
            else vhost.find_queue(record.destination)
        )
        return dest is not None and source.kind.has_binding(
            dest, record.routing_key, record.arguments
        )

    def _retry_pending(self) -> None:
        for _ in range(4):
            before = set(self.pending)
            if not before:
                return
            for key in sorted(before):
                if key in self.entries:
                    self._apply_key(key)
                else:
                    self.pending.discard(key)
            if self.pending == before:
                return

    # -- auth and runtime: rebuilt whole from their keys ---------------------------------

    def _flush(self) -> None:
        if self._auth_dirty:
            self._auth_dirty = False
            self._rebuild_auth()
        if self._runtime_dirty:
            self._runtime_dirty = False
            self._rebuild_runtime()

    def section_values(self, area: str, section: str) -> list[Any]:
        marker = self.layout.under(area, section)
        return [e.value for k, e in sorted(self.entries.items()) if k.startswith(marker)]

    def auth_document(self) -> dict[str, Any]:
        """The auth registry as etcd holds it (RabbitMQ's definitions); entries whose user
        or vhost is not there (yet) are left out."""
        doc: dict[str, Any] = {s: self.section_values("auth", s) for s in AUTH_SECTIONS}
        users = {u.get("name") for u in doc["users"]}
        vhosts = {v.get("name") for v in doc["vhosts"]}
        for section in ("permissions", "topic_permissions"):
            doc[section] = [
                p for p in doc[section] if p.get("user") in users and p.get("vhost") in vhosts
            ]
        return doc

    def _rebuild_auth(self) -> None:
        before = set(self.users.vhosts)
        try:
            load_store(self.users, self.auth_document())
        except AdminError as exc:
            log.warning("the auth registry in etcd cannot be loaded: %s", exc)
            return
        for name in self.users.vhosts:
            if name not in self.broker.vhosts:
                self._add_vhost(name)
        for name in before - set(self.users.vhosts):
            if self.on_vhost_deleted is not None:
                self.on_vhost_deleted(name)
            else:
                from leveret.server.auth_boot import remove_vhost_contents

                remove_vhost_contents(self.broker, name)
            self.view.queues = {k: v for k, v in self.view.queues.items() if k[0] != name}
            self._repend(name)
        if self.on_auth_changed is not None:
            self.on_auth_changed()

    def _add_vhost(self, name: str) -> None:
        vhost = self.broker.add_vhost(name)
        if self.prepare is not None:
            self.prepare(vhost)
        self._repend(name)
        marker = self.layout.under("entities")
        for key in self.entries:
            path = self.layout.parse(key)
            if key.startswith(marker) and path is not None and path.names[:1] == (name,):
                self.pending.add(key)
        self._runtime_dirty = True

    def _rebuild_runtime(self) -> None:
        runtime = self.runtime
        runtime.parameters = {
            (p["vhost"], p["component"], p["name"]): p.get("value")
            for p in self.section_values("runtime", "parameters")
            if p.get("vhost") in self.broker.vhosts
        }
        runtime.global_parameters = {
            p["name"]: p.get("value") for p in self.section_values("runtime", "global_parameters")
        }
        runtime.globals_changed()
        for section, operator in (("policies", False), ("operator_policies", True)):
            wanted: dict[str, dict[str, Any]] = {}
            for p in self.section_values("runtime", section):
                wanted.setdefault(p.get("vhost", ""), {})[p.get("name", "")] = p
            for vname, vhost in self.broker.vhosts.items():
                table = vhost.operator_policies if operator else vhost.policies
                rows = wanted.get(vname, {})
                current = {n: pol.to_json() for n, pol in table.items()}
                if current == rows:
                    continue
                table.clear()
                for name, p in rows.items():
                    try:
                        table[name] = make_policy(
                            vname,
                            name,
                            p.get("pattern"),
                            p.get("definition"),
                            p.get("priority", 0),
                            p.get("apply-to", "all"),
                            operator=operator,
                        )
                    except PolicyError as exc:
                        log.warning("policy '%s' in '%s' from etcd refused: %s", name, vname, exc)
                vhost.apply_policies()
        if self.on_runtime_changed is not None:
            self.on_runtime_changed()


def declare_recorded_queue(vhost: VirtualHost, name: str, **declared: Any) -> Queue:
    """Queue ``name`` of an etcd record declared on ``vhost`` (this node's model, or a
    scratch copy the model's checks run on): a server-named one (``amq.gen-``) made as its
    server made it, not refused as a client's reserved ``amq.`` name."""
    if name.startswith("amq."):
        return vhost.declare_queue("", generated_name=name, **declared)
    return vhost.declare_queue(name, **declared)
