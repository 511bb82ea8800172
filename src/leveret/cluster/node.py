"""A server as a cluster node: how a ``leveret serve --etcd ...`` joins, stays and leaves.

``leveret/assembly.py`` hands the server a factory for :class:`ClusterNode` (the server
never imports this package); the server calls :meth:`start` once its data directory is
recovered (before any listener opens), :meth:`register` once its listeners are up, and
:meth:`stop` when it stops.

How the local store and etcd relate (docs/cluster.md, "Durability"): etcd is the truth
for metadata; each node's data directory keeps what it needs to come back on its own:
the durable exchanges and bindings of its model and the durable queues it leads, with
their messages (the store's journal, as on a single node), and copies of the registry
and the parameters (``auth.json``, ``runtime.json``, rewritten as etcd's change). At
start, ``data_dir/cluster.json`` says which cluster the directory belongs to:

- etcd holds no cluster yet: this node makes one and writes what its directory holds
  into it (its users, vhosts, parameters, durable entities);
- etcd holds the cluster this directory belongs to: etcd is the truth; what the
  directory holds that etcd does not was deleted while the node was down, and goes;
- etcd holds another cluster (a node joining, or an etcd that lost its data): etcd's
  registry and parameters replace the node's; its vhosts with contents and its durable
  entities that etcd lacks are added to etcd, never dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.auth import persist
from leveret.auth.definitions import load_store
from leveret.auth.users import AdminError
from leveret.cluster.apply import Applier, QueueRecord
from leveret.cluster.declarations import SharedDeclarations
from leveret.cluster.etcd import EtcdClient, EtcdError, Put, absent
from leveret.cluster.journal import ClusterJournal
from leveret.cluster.keys import Layout, decode, encode, encode_arguments
from leveret.cluster.link import Links
from leveret.cluster.member_verbs import member_verbs
from leveret.cluster.membership import Membership, NameInUse
from leveret.cluster.metadata import MetadataStore, queue_value
from leveret.cluster.replication import Replication
from leveret.config import cluster_advertise, node_name
from leveret.errors import AMQPError
from leveret.model.exchange import Exchange
from leveret.model.queues.base import Queue
from leveret.server.auth_boot import remove_vhost_contents
from leveret.server.definitions import ImportCounts
from leveret.server.server import StartupError
from leveret.store.files import replace_durably
from leveret.store.stream_journal import StreamJournal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.config import Settings
    from leveret.model.vhost import VirtualHost
    from leveret.server.server import Server

log = logging.getLogger("leveret.cluster")

CLUSTER_FILE = "cluster.json"
# Seconds a starting node tries to reach etcd before it gives up.
CONNECT_TIMEOUT = 60.0


class ClusterError(StartupError):
    """The node cannot join its cluster; the server does not start (the CLI prints it)."""


@dataclass
class Mode:
    kind: str  # "seed", "member" or "join"
    cluster_id: str


class ClusterNode:
    """One server's part in the cluster: membership, the metadata store, its wiring."""

    def __init__(self, server: Server) -> None:
        settings = server.settings
        self.server = server
        self.name = node_name(settings)
        self.client = EtcdClient(list(settings.etcd))
        self.layout = Layout(settings.etcd_prefix)
        self.applier = Applier(
            self.layout,
            self.name,
            server.broker,
            server.users,
            server.runtime,
            on_vhost_deleted=self._vhost_deleted,
            on_auth_changed=self._auth_changed,
            on_runtime_changed=self._runtime_changed,
            prepare=self._prepare,
        )
        self.membership = Membership(
            self.client, self.layout, self.name, settings.cluster_lease_ttl
        )
        self.store = MetadataStore(self.client, self.applier, self.membership)
        # The inter-node link: proxies of the queues led elsewhere, the peers' listener.
        self.links = Links(server, self.name, self.applier.view)
        server.link_tls = self.links.tls  # reloaded with the amqps certificates
        self.applier.make_remote = self.links.make_remote
        # Each running node's link is dialled as soon as its record is known, not at the
        # first use of a queue it leads: a queue declared there is reachable from here at
        # once rather than answering "down" while the link connects.
        self.applier.on_node_running = self._node_running
        self.applier.on_node_gone = self._node_gone
        self.links.on_refused = self._link_refused
        # The memory alarm is cluster-wide (RabbitMQ's is): this node's goes into its
        # record, and the others' records block publishers here (``_node_running``).
        server.alarm.on_local = self._alarm_changed
        self._alarm_on = False
        self._alarm_writer: asyncio.Task[None] | None = None
        # Replicated quorum queues: leading, following, elections.
        self.replication = Replication(
            self.name,
            self.applier,
            self.store,
            self.membership,
            self.links,
            server.data_path / "replicas",
        )
        self.links.replication = self.replication
        self.applier.on_queue_record = self.replication.on_record
        # The cluster's id (etcd's ``cluster`` key), known once joined.
        self.cluster_id = ""
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- start -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Join: reconcile the recovered model with etcd, then follow etcd's changes."""
        server = self.server
        for vhost in server.broker.vhosts.values():
            self._prepare(vhost)
        local_auth = persist.snapshot(server.users)
        local_runtime = server.runtime.snapshot()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                mode = await self._mode()
        except (EtcdError, TimeoutError) as exc:
            raise ClusterError(
                f"cannot reach etcd at {', '.join(server.settings.etcd)}: {exc}"
            ) from None
        log.info("cluster %s: this node is %s (%s)", mode.cluster_id, self.name, mode.kind)
        self.cluster_id = mode.cluster_id
        # The link's secret: only nodes that read this cluster's etcd know its id.
        self.links.set_secret(mode.cluster_id)
        if mode.kind == "member":
            # Which incarnation of each queue's record this directory's messages belong to
            # (revisions of this cluster's etcd: meaningless for another).
            self.applier.incarnations = self._incarnations()
        if mode.kind == "join":
            await self._add_vhosts_with_contents()
        if mode.kind in ("seed", "join"):
            await self._upload_entities()
        self.replication.start()
        await self.store.load()
        if self.replication.prune():
            log.info("removed the copies of queues this node is no longer a member of")
        if mode.kind == "seed":
            await self.store.change_auth(lambda users: load_store(users, local_auth))
            await self.store.change_runtime(lambda runtime: runtime.load(local_runtime))
        elif mode.kind == "member":
            self._prune_local()
        self._write_cluster_file(mode.cluster_id)
        # No listener is open yet: what load() made is in that write; from now on each
        # change of incarnation is written as it is applied.
        self.applier.on_incarnations_changed = lambda: self._write_cluster_file(self.cluster_id)
        # From now on what front ends declare durably here is written behind to etcd: the
        # store's journal (a cluster node has a data directory) with its definitions told
        # to etcd too, one journal, not a wrapper read once more a confirmed publish.
        journal = server.broker.journal
        if not isinstance(journal, StreamJournal):
            raise TypeError(f"a cluster node journals to its store, not {type(journal).__name__}")
        server.broker.attach_journal(
            ClusterJournal(journal.disk, journal.streams, self.store, self._spawn)
        )
        server.admin.changer = self.store.change_auth
        server.admin.register(member_verbs(server.admin))  # rabbitmq-queues' verbs
        server.stream_server.stream_leader = self.stream_leader
        server.stream_server.stream_replicas = self.stream_replicas
        server.stream_server.stream_reader = self.replication.reader
        server.runtime.changer = self.store.change_runtime
        self.store.start_watch()

    def _cluster_file(self) -> dict[str, Any]:
        path = self.server.data_path / CLUSTER_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from None
        return data if isinstance(data, dict) else {}

    def _incarnations(self) -> dict[tuple[str, str], int]:
        found = self._cluster_file().get("queues")
        out: dict[tuple[str, str], int] = {}
        for item in found if isinstance(found, list) else []:
            if isinstance(item, list) and len(item) == 3 and isinstance(item[2], int):
                out[(str(item[0]), str(item[1]))] = item[2]
        return out

    def _write_cluster_file(self, cluster_id: str) -> None:
        # Written whenever the queues this node leads change incarnation, synchronously,
        # before a message can reach a queue made for a new one.
        doc = {
            "cluster": cluster_id,
            "node": self.name,
            "etcd_prefix": self.layout.prefix,
            "queues": [
                [vhost, name, revision]
                for (vhost, name), revision in sorted(self.applier.incarnations.items())
            ],
        }
        replace_durably(
            self.server.data_path / CLUSTER_FILE, (json.dumps(doc, indent=1) + "\n").encode()
        )

    async def _mode(self) -> Mode:
        mine = self._cluster_file().get("cluster")
        key = self.layout.cluster
        while True:
            try:
                found = await self.client.get(key)
                break
            except EtcdError as exc:
                log.warning("waiting for etcd: %s", exc)
                await asyncio.sleep(1.0)
        if not found.kvs:
            cluster_id = mine if isinstance(mine, str) else uuid.uuid4().hex
            made = await self.client.txn(
                [absent(key)], [Put(key, encode({"id": cluster_id, "created_by": self.name}))]
            )
            if made.succeeded:
                return Mode("seed", cluster_id)
            found = await self.client.get(key)
        theirs = str(decode(found.kvs[0].value).get("id", ""))
        if theirs == mine:
            return Mode("member", theirs)
        if mine:
            log.warning(
                "this data directory belonged to cluster %s, etcd holds cluster %s: joining it "
                "(what this node holds that etcd lacks is added to it)",
                mine,
                theirs,
            )
        return Mode("join", theirs)

    async def _add_vhosts_with_contents(self) -> None:
        """A joining node's vhosts that hold something: added to etcd's registry."""
        broker = self.server.broker
        keep = [
            name
            for name, vhost in broker.vhosts.items()
            if vhost.queues or any(n and not n.startswith("amq.") for n in vhost.exchanges)
        ]
        for name in keep:
            info = self.server.users.vhosts.get(name)
            value = {
                "name": name,
                "limits": [],
                "metadata": {
                    "description": info.description if info is not None else "",
                    "tags": list(info.tags) if info is not None else [],
                },
            }
            await self.store.put_if_absent(self.layout.key("auth", "vhosts", name), encode(value))

    async def _upload_entities(self) -> None:
        """The durable exchanges, queues (led by this node) and bindings this node holds,
        added to etcd where it lacks them."""
        layout = self.layout
        for vname, vhost in list(self.server.broker.vhosts.items()):
            for name, exchange in list(vhost.exchanges.items()):
                if name and not name.startswith("amq.") and exchange.durable:
                    await self.store.put_if_absent(
                        layout.exchange(vname, name), _exchange_value(exchange)
                    )
            for name, queue in list(vhost.queues.items()):
                if queue.durable and not queue.exclusive:
                    record = QueueRecord(
                        vname,
                        name,
                        True,
                        queue.auto_delete,
                        False,
                        dict(queue.arguments),
                        self.name,
                    )
                    await self.store.put_if_absent(layout.queue(vname, name), queue_value(record))
            for key, value in _model_bindings(self.store, vname, vhost):
                await self.store.put_if_absent(key, value)

    def _prune_local(self) -> None:
        """What the recovered model holds that etcd does not: deleted while this node was
        down (etcd is the truth for a member)."""
        entries = self.applier.entries
        layout = self.layout
        moved: list[tuple[bytes, bytes]] = []
        self.applier.applying = True
        try:
            for vname, vhost in list(self.server.broker.vhosts.items()):
                for name in list(vhost.exchanges):
                    if (
                        name
                        and not name.startswith("amq.")
                        and layout.exchange(vname, name) not in entries
                    ):
                        log.info("exchange '%s' in '%s' was deleted meanwhile", name, vname)
                        vhost.delete_exchange(name)
                for name, queue in list(vhost.queues.items()):
                    key = layout.queue(vname, name)
                    entry = entries.get(key)
                    if entry is None:
                        log.info("queue '%s' in '%s' was deleted meanwhile", name, vname)
                        vhost.remove_queue(queue)
                    elif entry.value.get("leader") != self.name:
                        # Another node leads it now (a replicated queue's election while
                        # this node was down): what this node holds of it is not the
                        # queue; its proxy and bindings take its place.
                        log.info("queue '%s' in '%s' is led by another node now", name, vname)
                        vhost.remove_queue(queue)
                        moved.append((key, layout.bindings_to(vname, "q", name)))
                for key, value in _model_bindings(self.store, vname, vhost):
                    if key not in entries:
                        _unbind_model(vhost, value)
        finally:
            self.applier.applying = False
        for key, bindings in moved:
            self.applier.reapply([key, *(k for k in list(entries) if k.startswith(bindings))])

    async def register(self) -> None:
        """Register this node (its lease and record) once its listeners are up; then remove
        the records of what did not survive its restart (its non-durable and exclusive
        queues), fenced by its new lease."""
        server = self.server
        settings = server.settings
        plane = server.management
        prometheus = list(plane.prometheus_urls) if plane is not None else []
        cluster_port = await self.links.listen()
        record: dict[str, Any] = {
            "listeners": list(server.listening),
            "management": [u for u in plane.urls if u not in prometheus] if plane else [],
            "prometheus": prometheus,
            # Where the other nodes ask this one's API (its own, though the port is shared).
            "api": list(plane.node_urls) if plane is not None else [],
            "cluster": _cluster_address(settings, cluster_port),
            "data_dir": str(server.data_path),
        }
        stream = _stream_address(server)
        if stream is not None:
            record["stream"] = stream
        stream_tls = _stream_address(server, tls=True)
        if stream_tls is not None:
            record["stream_tls"] = stream_tls
        self.membership.record = record
        try:
            await self.membership.start(wait=settings.cluster_lease_ttl * 2 + 2)
        except NameInUse as exc:
            raise ClusterError(str(exc)) from None
        for record_ in list(self.applier.view.queues.values()):
            if record_.leader != self.name:
                continue
            vhost = server.broker.vhosts.get(record_.vhost)
            if vhost is None or record_.name not in vhost.queues:
                await self.store.queue_removed(record_.vhost, record_.name)

    async def stop(self) -> None:
        await self.replication.stop()
        await self.links.close()
        await self.store.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.membership.stop()
        await self.client.close()

    # -- what the server asks --------------------------------------------------------------

    async def import_entities(self, doc: Mapping[str, Any], vhost: str | None) -> ImportCounts:
        """The exchanges, queues and bindings of a definitions document, declared through
        etcd (``server/definitions.py``'s ``import_entities`` on a single node)."""
        counts = ImportCounts()

        def where(entry: Mapping[str, Any]) -> str:
            name = vhost if vhost is not None else entry.get("vhost")
            if not isinstance(name, str):
                raise AdminError("definitions: an entry names no vhost")
            return name

        try:
            for entry in doc.get("exchanges") or []:
                await self.store.declare_exchange(
                    where(entry),
                    str(entry["name"]),
                    str(entry.get("type", "direct")),
                    durable=bool(entry.get("durable", True)),
                    auto_delete=bool(entry.get("auto_delete", False)),
                    internal=bool(entry.get("internal", False)),
                    arguments=dict(entry.get("arguments") or {}),
                )
                counts.exchanges += 1
            for entry in doc.get("queues") or []:
                await self.store.declare_queue(
                    where(entry),
                    str(entry["name"]),
                    durable=bool(entry.get("durable", True)),
                    auto_delete=bool(entry.get("auto_delete", False)),
                    arguments=dict(entry.get("arguments") or {}),
                )
                counts.queues += 1
            for entry in doc.get("bindings") or []:
                await self.store.bind(
                    where(entry),
                    str(entry["source"]),
                    "exchange" if entry.get("destination_type") == "exchange" else "queue",
                    str(entry["destination"]),
                    str(entry.get("routing_key", "")),
                    dict(entry.get("arguments") or {}),
                )
                counts.bindings += 1
        except KeyError as exc:
            raise AdminError(f"definitions: an entry has no {exc}") from None
        except AMQPError as exc:
            raise AdminError(exc.reply_text) from None
        return counts

    def status(self) -> dict[str, Any]:
        """``leveret ctl cluster_status``: members, running nodes, their listeners, the
        queues each leads, their alarms."""
        view = self.applier.view
        leaders = view.leaders()
        return {
            "cluster_name": self.server.runtime.global_parameters.get("cluster_name", ""),
            "node": self.name,
            "members": sorted(set(view.members) | set(view.nodes)),
            "running": sorted(view.nodes),
            "listeners": {n: view.nodes[n].get("listeners", []) for n in sorted(view.nodes)},
            "queue_leaders": {n: leaders.get(n, 0) for n in sorted(set(leaders) | set(view.nodes))},
            # Each running node's resource alarms (RabbitMQ's "Alarms" section).
            "alarms": {n: list(view.nodes[n].get("alarms") or []) for n in sorted(view.nodes)},
            "lease_held": self.membership.held,
        }

    def stream_leader(
        self, vhost: str, name: str, tls: bool = False
    ) -> tuple[str, str, int] | None:
        """The node leading stream ``name`` of ``vhost`` when it is another running node,
        with its stream listener's host and port (its TLS one for a client that came over
        TLS: what the stream protocol's ``metadata`` names, so clients connect where the
        data is); None otherwise."""
        view = self.applier.view
        record = view.queues.get((vhost, name))
        if record is None or record.leader == self.name:
            return None
        kind = record.arguments.get("x-queue-type")
        if (kind.decode() if isinstance(kind, bytes) else kind) != "stream":
            return None
        address = view.stream_address(record.leader, tls=tls)
        return None if address is None else (record.leader, *address)

    def stream_replicas(
        self, vhost: str, name: str, tls: bool = False
    ) -> list[tuple[str, str, int]]:
        """A replicated stream's running members besides its leader, with their stream
        listeners (node "" for this node): the ``replicas`` of the stream protocol's
        ``metadata``, as RabbitMQ lists them (their nodes serve subscriptions from their
        copies: ``Replication.reader``)."""
        view = self.applier.view
        record = view.queues.get((vhost, name))
        if record is None or not record.replicated:
            return []
        kind = record.arguments.get("x-queue-type")
        if (kind.decode() if isinstance(kind, bytes) else kind) != "stream":
            return []
        out: list[tuple[str, str, int]] = []
        for member in record.members:
            if member == record.leader or member not in view.nodes:
                continue
            if member == self.name:
                out.append(("", "", 0))
                continue
            address = view.stream_address(member, tls=tls)
            if address is not None:
                out.append((member, *address))
        return out

    # -- what the applier and the model tell it -------------------------------------------

    def _prepare(self, vhost: VirtualHost) -> None:
        vhost.auto_delete_exchanges = False
        shared = SharedDeclarations(vhost, self.store, self._spawn)
        vhost.shared = shared
        vhost.on_queue_removed = lambda queue: self._queue_removed(shared, queue)

    def _node_running(self, name: str) -> None:
        """``name``'s record was put: it runs (a new node, or its record changed)."""
        if name != self.name:
            self.links.peer(name)
            record = self.applier.view.nodes.get(name) or {}
            alarms = record.get("alarms")
            self.server.alarm.remote_alarm(name, isinstance(alarms, list) and "memory" in alarms)

    def _node_gone(self, name: str) -> None:
        if name != self.name:
            self.server.alarm.remote_alarm(name, False)
            self._spawn(self.store.exclusive_of_gone_node(name))

    def _alarm_changed(self, on: bool) -> None:
        self._alarm_on = on
        if self._alarm_writer is None or self._alarm_writer.done():
            self._alarm_writer = self._spawn(self._write_alarm())

    async def _write_alarm(self) -> None:
        """One writer puts the alarm's latest state in the node's record: writes racing
        each other could leave a cleared alarm set for the whole cluster."""
        written: bool | None = None
        while written != self._alarm_on:
            wanted = self._alarm_on
            try:
                await self.membership.update({"alarms": ["memory"] if wanted else []})
            except EtcdError as exc:
                # Kept in the record the next registration puts, and tried again.
                log.warning("could not put the memory alarm in the node's record: %s", exc)
                await asyncio.sleep(1.0)
                continue
            written = wanted

    def _link_refused(self, name: str) -> None:
        """The link to ``name`` was up, closed, and its port now refuses connections: no
        process listens there (killed, crashed). Its lease is revoked rather than waited
        out, so its record goes now and the members of the queues it led elect at once
        (as RabbitMQ's Erlang distribution sees a dead node's connection close)."""
        if name != self.name and not self.links.closing:
            self._spawn(self._revoke_lease_of(name))

    async def _revoke_lease_of(self, name: str) -> None:
        try:
            found = await self.client.get(self.layout.node(name))
            kv = found.kvs[0] if found.kvs else None
            if kv is None or not kv.lease:
                return  # gone already
            if self.links.peer(name).up:
                return  # back (restarted) meanwhile: its record is its new lease's
            await self.client.revoke(kv.lease)
        except EtcdError as exc:
            log.warning("node '%s' refuses the inter-node link; its lease stays: %s", name, exc)
            return
        log.warning(
            "node '%s' refuses the inter-node link (its process is gone): its lease %x revoked",
            name,
            kv.lease,
        )

    def _queue_removed(self, shared: SharedDeclarations, queue: Queue) -> None:
        if self.applier.applying:
            return  # etcd's own change, being applied
        vhost = shared.vhost
        if queue.forwards:
            # Deleted through this node, led by another: its record goes, and its leader
            # removes it when that reaches it.
            removal = self._spawn(self.store.delete_queue(vhost.name, queue.name))
        else:
            removal = self._spawn(self.store.queue_removed(vhost.name, queue.name))
        shared.removing(queue.name, removal)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a cluster write failed: %s", task.exception())

    def _vhost_deleted(self, name: str) -> None:
        text = f"vhost '{name}' is deleted"
        for conn in list(self.server.connections):
            shell = conn.shell
            if shell is not None and shell.opened and shell.info.vhost == name:
                conn.shutdown(text)
        remove_vhost_contents(self.server.broker, name)

    def _auth_changed(self) -> None:
        doc = persist.snapshot(self.server.users)
        path = self.server.data_path / persist.AUTH_FILE
        self._spawn(asyncio.to_thread(persist.save, path, doc))

    def _runtime_changed(self) -> None:
        self._spawn(self.server.runtime.save())


def _exchange_value(exchange: Exchange) -> bytes:
    return encode(
        {
            "type": exchange.type_name,
            "durable": exchange.durable,
            "auto_delete": exchange.auto_delete,
            "internal": exchange.internal,
            "arguments": encode_arguments(dict(exchange.arguments)),
        }
    )


def _model_bindings(
    store: MetadataStore, vname: str, vhost: VirtualHost
) -> list[tuple[bytes, bytes]]:
    """The durable bindings of a vhost's model as etcd keys and values."""
    out = []
    for name, exchange in vhost.exchanges.items():
        if not name or not exchange.durable:
            continue
        for destination, routing_key, arguments in exchange.kind.bindings():
            if isinstance(destination, Queue):
                if not destination.durable or destination.exclusive:
                    continue
                kind = "queue"
            elif isinstance(destination, Exchange):
                if not destination.durable:
                    continue
                kind = "exchange"
            else:
                continue
            args = dict(arguments or {})
            key = store.binding_key(vname, name, kind, destination.name, routing_key, args)
            value = {
                "source": name,
                "destination": destination.name,
                "kind": kind,
                "routing_key": routing_key,
                "arguments": encode_arguments(args),
            }
            out.append((key, encode(value)))
    return out


def _unbind_model(vhost: VirtualHost, value: bytes) -> None:
    from leveret.cluster.apply import BindingRecord

    record = BindingRecord.from_value(vhost.name, decode(value))
    if record.dest_kind == "exchange":
        vhost.unbind_exchange(
            record.destination, record.source, record.routing_key, record.arguments
        )
    else:
        queue = vhost.queues.get(record.destination)
        if queue is not None:
            vhost.unbind_queue(
                record.destination,
                record.source,
                record.routing_key,
                record.arguments,
                owner=queue.exclusive_owner,
            )


def advertised(host: str, port: int) -> str:
    """``host:port`` as the other nodes dial it. A wildcard address (``host = "0.0.0.0"`` to
    listen on every interface) names no interface they can reach: the machine's name stands
    for it, as in RabbitMQ's node names (``cluster_peer_addresses`` overrides either)."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _cluster_address(settings: Settings, cluster_port: int) -> str:
    """What the record names for this node's link: ``cluster_advertise`` when it is set
    (its port, else the one the link listens on), else ``host:cluster_port``."""
    chosen = cluster_advertise(settings)
    if chosen is None:
        return advertised(settings.host, cluster_port)
    host, port = chosen
    return advertised(host, port or cluster_port)


def _stream_address(server: Server, *, tls: bool = False) -> str | None:
    """The stream listener the other nodes name for this node's streams when
    ``stream_advertised_host`` or ``_port`` (with ``tls``, ``_tls_port``) says it is not
    the listener (the record's ``stream``, ``stream_tls``; without it they take its first
    ``rabbitmq-stream://`` or ``+tls://`` listener). A wildcard host left is read as the
    other listeners' (``View.stream_address``)."""
    settings = server.settings
    port_setting = settings.stream_advertised_tls_port if tls else settings.stream_advertised_port
    if not (settings.stream_advertised_host or port_setting):
        return None
    scheme = "rabbitmq-stream+tls://" if tls else "rabbitmq-stream://"
    if not any(url.startswith(scheme) for url in server.listening):
        return None  # no listener to reach behind the advertised address
    host = settings.stream_advertised_host or (
        (settings.tls_host or settings.host) if tls else settings.host
    )
    # The advertised port, else the bound one.
    stream = server.stream_server.settings
    port = stream.tls_port if tls else stream.port
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def make_node(server: Server) -> ClusterNode:
    return ClusterNode(server)


__all__ = ["ClusterError", "ClusterNode", "make_node"]
