"""Boot, serve, and shut down: recovery, listeners, signals and a graceful drain.

At boot the store under ``data_dir`` is read back and the model rebuilt from it before the
listener opens, so a client never sees a half-recovered broker. At shutdown the store
writes what is pending (acks included) before the process exits.

On SIGINT/SIGTERM every connection gets connection.close 320 CONNECTION_FORCED, the broker
waits briefly for the close handshakes, then exits. SIGHUP reloads the TLS certificates.

Users, vhosts and permissions come from ``data_dir/auth.json`` (``server/auth_boot.py``
``boot_auth``, after the store's recovery); once the listeners are up, the control channel
``leveret ctl`` speaks to opens in the data directory (``server/ctl/unix_socket.py``).

The management plane stands above the server: whoever builds a ``Server`` hands it a
factory for the plane (``leveret/assembly.py`` does, for ``leveret serve`` and the embedded
broker), so nothing here imports ``leveret.management``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack

from leveret import build_info
from leveret.auth.users import UserStore
from leveret.config import WORKERS_FILE, default_data_dir, node_name
from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import stored_message
from leveret.convert.stream_records import RECORDS, legacy_entry
from leveret.convert.stream_stamp import stamp_stream
from leveret.model.broker import Broker
from leveret.model.dtx import xid_key
from leveret.server import rows
from leveret.server.amqp091 import Limits
from leveret.server.auth_boot import AuthBootError, boot_auth
from leveret.server.connection import ConnectionProtocol
from leveret.server.ctl.admin import Admin
from leveret.server.ctl.entities import entity_verbs
from leveret.server.ctl.messages import message_verbs
from leveret.server.ctl.parameters import parameter_verbs
from leveret.server.ctl.quorum import quorum_verbs
from leveret.server.ctl.streams import super_stream_verbs
from leveret.server.ctl.unix_socket import ControlChannel, ControlChannelError
from leveret.server.deadlines import DeadlineTimer
from leveret.server.listeners import Reloadable, TlsContexts, TlsError
from leveret.server.memory_alarm import MemoryAlarm, default_high_watermark
from leveret.server.parameters import Runtime, boot_runtime
from leveret.server.rabbitstream import StreamConnection, StreamServer, StreamSettings
from leveret.server.storm_gc import StormCollector, raise_young_threshold
from leveret.store.disk import DiskStore, StoreInUse
from leveret.store.dtx_log import DtxFile
from leveret.store.pages import PageFiles
from leveret.store.parameters_file import RuntimeFileError
from leveret.store.records import StoreCorrupt
from leveret.store.recovery import restore
from leveret.store.stream_journal import StreamJournal
from leveret.store.stream_log import StreamStore

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from leveret.config import Settings
    from leveret.server.shell.contract import FrontEnd
    from leveret.server.shell.shell import FrontEndFactory, Shell

log = logging.getLogger("leveret.server")


class ConnectionOptions(TypedDict, total=False):
    """``ConnectionProtocol``'s own keywords (``Server.new_connection``)."""

    cert_login_from: str
    front_end: FrontEndFactory | None
    local_identity: str | None
    local_peer: str


SHUTDOWN_GRACE = 3.0


class StoreError(Exception):
    """The data directory cannot be used; the CLI prints this and exits with status 1."""


class StartupError(StoreError):
    """A file or setting the broker needs at boot cannot be used (auth.json, TLS files);
    printed by the CLI like a store error, exit status 1."""


class ManagementPlane(Protocol):
    """What the server needs of its management plane: start it, close it, and the URLs it
    listens on (``management/app.py``'s ``ManagementServer``)."""

    urls: list[str]
    # The URLs of the API that reach this node only (others may share its port), and
    # those of its Prometheus endpoint.
    node_urls: list[str]
    prometheus_urls: list[str]

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Plugin(Protocol):
    """Something above the server that runs inside it (``leveret.links``: shovels and
    federation). Made with the server, before recovery, so it can register its parameter
    checks and verbs; started once the broker serves; closed first at shutdown."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class ClusterPart(Protocol):
    """What the server needs of its part in a cluster (``cluster/node.py``'s
    ``ClusterNode``): join once recovered, register once listening, leave."""

    name: str

    async def start(self) -> None: ...

    async def register(self) -> None: ...

    async def stop(self) -> None: ...


class Server:
    """A running broker: the model, its listeners and its connections."""

    def __init__(
        self,
        settings: Settings,
        *,
        management: Callable[[Server], ManagementPlane] | None = None,
        cluster: Callable[[Server], ClusterPart] | None = None,
        plugins: Sequence[Callable[[Server], Plugin]] = (),
    ) -> None:
        self.settings = settings
        self._management_factory = management
        self._cluster_factory = cluster
        # This node's part in a cluster (settings.etcd); None on a single node.
        self.cluster: ClusterPart | None = None
        self.node_name = node_name(settings)
        rows.set_node_name(self.node_name)
        timeout = settings.consumer_timeout
        self.broker = Broker(consumer_timeout=timeout / 1000 if timeout else None)
        # Filled from data_dir/auth.json (or first-boot defaults) by boot_auth in _recover.
        self.users = UserStore(loopback_users=settings.loopback_users)
        self.users.connection_max = settings.connection_max
        self.users.anonymous_user = settings.anonymous_login_user
        self.data_path = Path(settings.data_dir or default_data_dir())
        self.tls: TlsContexts | None = None
        # The inter-node link's TLS (``cluster/link_tls.py``), set by the cluster part when
        # cluster_tls_certfile is: reloaded with the amqps certificates.
        self.link_tls: Reloadable | None = None
        self.listening: list[str] = []
        self.started_at = time.time()
        self.control: ControlChannel | None = None
        self.limits = Limits(
            channel_max=settings.channel_max,
            frame_max=settings.frame_max,
            heartbeat=settings.heartbeat,
            max_message_size=settings.max_message_size,
        )
        self.connections: set[ConnectionProtocol] = set()
        # A full collection once a storm of new connections is over (server/storm_gc.py).
        self.storm_gc = StormCollector()
        self._storm_timer: asyncio.TimerHandle | None = None
        watermark = settings.memory_high_watermark
        self.alarm = MemoryAlarm(
            self.broker.gauge, default_high_watermark() if watermark is None else watermark
        )
        # Past this, queues page large bodies as well as deep runs of small ones (fifo.py).
        self.broker.gauge.paging_level = self.alarm.high * settings.memory_paging_percent // 100
        self.servers: list[asyncio.Server] = []
        self.stopping = asyncio.Event()
        # Set once every listener is up (the supervisor of --workers waits for it).
        self.ready = asyncio.Event()
        self.deadlines: DeadlineTimer | None = None
        self.store: DiskStore | None = None
        self.pages: PageFiles | None = None
        self.streams: StreamStore | None = None
        self.dtx: DtxFile | None = None
        self.stream_server = StreamServer(
            self.broker,
            self.users,
            StreamSettings(
                heartbeat=settings.heartbeat,
                host=settings.stream_advertised_host or _advertised(settings.host),
                port=settings.stream_advertised_port or settings.stream_port,
                tls_port=settings.stream_advertised_tls_port or settings.stream_tls_port,
            ),
        )
        # Policies and parameters (data_dir/runtime.json), the admin verbs (leveret ctl and
        # the HTTP API share them) and the management plane (management/).
        self.runtime = Runtime(self.broker)
        self.admin = Admin(self)
        # Queues, exchanges, connections, policies and the whole definitions document; delayed
        # messages, browse, move and replay (Leveret's own): these modules stand above admin.py.
        self.admin.register(entity_verbs(self.admin))
        self.admin.register(message_verbs(self.admin))
        self.admin.register(super_stream_verbs(self.admin))  # rabbitmq-streams' verbs
        self.admin.register(parameter_verbs(self.admin))
        self.admin.register(quorum_verbs())  # rabbitmq-queues' (a cluster node's replace them)
        self.management: ManagementPlane | None = None
        self.plugins: list[Plugin] = [make(self) for make in plugins]

    @property
    def admin_host(self) -> Server:
        return self

    def _recover(self, loop: asyncio.AbstractEventLoop) -> None:
        path = str(self.data_path)
        started = time.monotonic()
        store = DiskStore(path)
        try:
            recovered = store.open()
        except (StoreCorrupt, StoreInUse) as exc:
            store.close()
            raise StoreError(str(exc)) from None
        except OSError as exc:
            store.close()
            raise StoreError(f"cannot use data directory {path}: {exc}") from None
        # The store holds the directory's lock now, so its scratch pages are ours to reset.
        self.pages = PageFiles(store.path / "pages")
        self.broker.attach_pager(self.pages)
        streams = StreamStore(
            Path(path) / "streams",
            RECORDS,
            stamp_stream,
            sync=self.settings.stream_confirm == "fsync",
            legacy_entry=legacy_entry,
        )
        streams.gauge = self.broker.gauge
        streams.on_synced = self.alarm.check
        self.broker.attach_streams(streams)
        try:
            restore(self.broker, recovered, stored_message)
            stream_count = self._open_streams(streams)
        except (StoreCorrupt, OSError) as exc:
            store.close()
            raise StoreError(str(exc)) from None
        self.broker.attach_journal(StreamJournal(store, streams))
        self._recover_dtx(Path(path), loop, recovered.dtx_markers)
        store.start(loop)
        streams.start(loop)
        self.store = store
        self.streams = streams
        try:
            boot_auth(self.users, self.broker, self.data_path, self.settings)
        except AuthBootError as exc:
            raise StartupError(str(exc)) from None
        try:
            boot_runtime(self.runtime, self.data_path)
        except RuntimeFileError as exc:
            raise StartupError(str(exc)) from None
        log.info(
            "recovered %d exchanges, %d queues, %d bindings and %d messages from %s in %.2f s",
            len(recovered.exchanges),
            len(recovered.queues),
            len(recovered.bindings),
            recovered.messages,
            path,
            time.monotonic() - started,
        )
        if stream_count:
            log.info("opened %d streams", stream_count)

    def _recover_dtx(
        self, path: Path, loop: asyncio.AbstractEventLoop, markers: dict[bytes, int]
    ) -> None:
        """Prepared distributed-transaction branches come back in doubt, holding what they
        settle out of their (recovered) queues until their coordinator decides; branches
        whose commit was logged are finished (``store/dtx_log.py``: with the store's
        ``markers`` of commits whose effects it holds)."""
        dtx = DtxFile(path / "dtx.log")
        try:
            prepared = dtx.open()
        except (StoreCorrupt, OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"cannot read {path / 'dtx.log'}: {exc}") from None
        dtx.start(loop)
        coordinator = self.broker.dtx
        coordinator.log = dtx
        self.dtx = dtx
        markers = dict(markers)
        in_doubt = 0
        for branch in prepared:
            vhost = self.broker.add_vhost(branch.vhost)
            if branch.committed:
                marker = markers.pop(xid_key(branch.xid), None)
                coordinator.finish_logged(branch, vhost, wire_message, marker)
                log.info(
                    "finished the logged commit of a transaction branch (%s)",
                    "its effects were stored" if marker is not None else "applied again",
                )
            else:
                coordinator.restore(branch, vhost, wire_message)
                in_doubt += 1
        # Markers of commits the log had finished before the crash: no longer needed.
        journal = self.broker.journal
        for marker in markers.values():
            journal.dtx_forgotten(marker)
        if in_doubt:
            log.info("recovered %d prepared transaction branches", in_doubt)

    def _open_streams(self, streams: StreamStore) -> int:
        """Open every stream's files now (torn tails are cut at boot, retention timers start)
        and delete the files of streams deleted before a crash."""
        live = [
            queue.store_id
            for vhost in self.broker.vhosts.values()
            for queue in vhost.queues.values()
            if queue.open_storage()
        ]
        streams.remove_orphans(live)
        return len(live)

    async def start(self) -> None:
        if (self.data_path / WORKERS_FILE).exists():
            raise StartupError(
                f"{self.data_path} is the data directory of 'leveret serve --workers': run that "
                f"again, or give one worker's directory ({self.data_path}/node-1, ...)"
            )
        loop = asyncio.get_running_loop()
        self.deadlines = DeadlineTimer(loop, self.broker.timers)
        self._recover(loop)
        if self.settings.etcd:
            # Joined before any listener opens: clients see the cluster's definitions.
            if self._cluster_factory is None:
                raise StartupError("this server was built without the cluster part")
            self.cluster = self._cluster_factory(self)
            await self.cluster.start()
        if self.settings.load_definitions:
            await self._load_definitions(self.settings.load_definitions)
        server = await loop.create_server(
            self._accepted,
            host=self.settings.host,
            port=self.settings.port,
            reuse_address=True,
            reuse_port=self.settings.reuse_port or None,
        )
        self.servers.append(server)
        for sock in server.sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            self.listening.append(f"amqp://{shown}:{port}")
            log.info(
                "listening on amqp://%s:%d (%s; %s)",
                shown,
                port,
                build_info.describe(),
                build_info.other_build(),
            )
        await self._start_stream(loop, tls=False)
        if self.settings.tls_certfile:
            await self._start_tls(loop)
        self.control = ControlChannel(self.admin, self.data_path)
        try:
            await self.control.start()
        except ControlChannelError as exc:
            self.control = None
            log.warning("leveret ctl will not reach this broker: %s", exc)
        for plugin in self.plugins:
            await plugin.start()
        if self.settings.management and self._management_factory is not None:
            self.management = self._management_factory(self)
            await self.management.start()
        if self.cluster is not None:
            await self.cluster.register()
        # What boot made (modules, recovered messages and pending scheduled messages, the
        # listeners) lives as long as the broker: keep it out of the cyclic collector's
        # full collections, which otherwise walk all of it and stall the loop (measured: a
        # 150 ms pause after recovering 10k scheduled messages, delaying their delivery).
        gc.freeze()
        # A burst's messages are freed by their acks before the young generation is
        # collected, rather than walked and promoted on their way (issue 26).
        raise_young_threshold()
        self.ready.set()

    async def _load_definitions(self, path: str) -> None:
        """RabbitMQ's load_definitions: import a definitions file at every boot."""
        import json

        from leveret.auth.users import AdminError
        from leveret.server.definitions import import_document

        try:
            text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
            doc = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise StartupError(f"cannot load definitions from {path}: {exc}") from None
        try:
            async with self.admin.lock:
                counts = await import_document(self, doc)
        except AdminError as exc:
            raise StartupError(f"cannot load definitions from {path}: {exc}") from None
        log.info("loaded definitions from %s: %s", path, counts)

    def _stream_front_end(self, shell: Shell) -> FrontEnd:
        return StreamConnection(self.stream_server, shell)

    async def _start_stream(self, loop: asyncio.AbstractEventLoop, *, tls: bool) -> None:
        """The stream-protocol listener (``stream_port``; with TLS, ``stream_tls_port``).
        A port that cannot be had is logged and the broker runs without it (the default
        5552 is often taken by a RabbitMQ on the same machine)."""
        settings = self.settings
        port = settings.stream_tls_port if tls else settings.stream_port
        host = (settings.tls_host or settings.host) if tls else settings.host
        scheme = "rabbitmq-stream+tls" if tls else "rabbitmq-stream"
        if settings.reuse_port and not tls:
            # A worker of --workers: the shared port reaches any worker, but a stream
            # client is told where a stream's leader is (metadata) and must reach that
            # worker, so each worker also listens on a port of its own, named first in
            # its record (``View.stream_address``) and in its own metadata answers.
            own = await self._stream_listener(loop, host, 0, tls=False, shared=False)
            if own is None:
                return
            self._listening_on(own, scheme)
        server = await self._stream_listener(loop, host, port, tls=tls, shared=True)
        if server is not None:
            self._listening_on(server, scheme)

    async def _stream_listener(
        self, loop: asyncio.AbstractEventLoop, host: str, port: int, *, tls: bool, shared: bool
    ) -> asyncio.Server | None:
        settings = self.settings
        try:
            server = await loop.create_server(
                lambda: self._accepted(front_end=self._stream_front_end),
                host=host,
                port=port,
                reuse_address=True,
                reuse_port=(settings.reuse_port and shared) or None,
                ssl=self.tls.listening if tls and self.tls is not None else None,
            )
        except OSError as exc:
            log.error("stream protocol listener on %s:%d not started: %s", host, port, exc)
            return None
        self.servers.append(server)
        return server

    def _listening_on(self, server: asyncio.Server, scheme: str) -> None:
        # The port clients are told is the listener's unless stream_advertised_port (over
        # TLS, stream_advertised_tls_port) names another (a container's published port, a
        # NAT): the first listener's of its scheme.
        tls = scheme.endswith("+tls")
        chosen = (
            self.settings.stream_advertised_tls_port
            if tls
            else self.settings.stream_advertised_port
        )
        advertise = not chosen and not any(url.startswith(f"{scheme}://") for url in self.listening)
        for sock in server.sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            bound_host, bound_port = sock.getsockname()[:2]
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            self.listening.append(f"{scheme}://{shown}:{bound_port}")
            log.info("listening on %s://%s:%d", scheme, shown, bound_port)
            if advertise:  # (the first socket's: port 0 on a wildcard host binds several)
                if tls:
                    self.stream_server.settings.tls_port = bound_port
                else:
                    self.stream_server.settings.port = bound_port
                advertise = False

    async def _start_tls(self, loop: asyncio.AbstractEventLoop) -> None:
        """The amqps listener beside the plain one: same front end, TLS first."""
        try:
            self.tls = TlsContexts(self.settings)
        except TlsError as exc:
            raise StartupError(str(exc)) from None
        server = await loop.create_server(
            lambda: self._accepted(cert_login_from=self.settings.ssl_cert_login_from),
            host=self.settings.tls_host or self.settings.host,
            port=self.settings.tls_port,
            reuse_address=True,
            reuse_port=self.settings.reuse_port or None,
            ssl=self.tls.listening,
        )
        self.servers.append(server)
        for sock in server.sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            self.listening.append(f"amqps://{shown}:{port}")
            log.info("listening on amqps://%s:%d", shown, port)
        await self._start_stream(loop, tls=True)

    def new_connection(self, **options: Unpack[ConnectionOptions]) -> ConnectionProtocol:
        """A connection to this broker's core: what every connection shares, and
        ``options`` (the front end, the TLS login rule, an in-process link's identity)."""
        return ConnectionProtocol(
            self.broker, self.users, self.limits, self.connections, self.alarm, **options
        )

    def _accepted(self, **options: Unpack[ConnectionOptions]) -> ConnectionProtocol:
        """A listener's protocol factory: a new connection, counted for the storm
        collector."""
        protocol = self.new_connection(**options)
        due = self.storm_gc.accepted(protocol.loop.time())
        if due is not None and self._storm_timer is None:
            # Armed for the storm's earliest end; the check puts it off while accepts go on.
            self._storm_timer = protocol.loop.call_at(due, self._storm_check, protocol.loop)
        return protocol

    def _storm_check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._storm_timer = None
        again = self.storm_gc.check(loop.time())
        if again is not None:
            self._storm_timer = loop.call_at(again, self._storm_check, loop)

    async def stop(self) -> None:
        if self._storm_timer is not None:
            self._storm_timer.cancel()
            self._storm_timer = None
        for plugin in reversed(self.plugins):
            await plugin.close()
        if self.management is not None:
            await self.management.close()
            self.management = None
        if self.control is not None:
            await self.control.close()
            self.control = None
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.shutdown("broker forced connection closure with reason 'shutdown'")
        waits = [conn.closed.wait() for conn in list(self.connections)]
        if waits:
            _done, pending = await asyncio.wait(
                [asyncio.ensure_future(w) for w in waits], timeout=SHUTDOWN_GRACE
            )
            for task in pending:
                task.cancel()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        for server in self.servers:
            await server.wait_closed()
        if self.cluster is not None:
            await self.cluster.stop()  # its lease revoked: down for the others at once
            self.cluster = None
        if self.deadlines is not None:
            self.deadlines.close()
        if self.streams is not None:
            self.streams.close()
            self.streams = None
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.dtx is not None:
            self.dtx.close()
            self.dtx = None
        if self.pages is not None:
            self.pages.close()
            self.pages = None
        log.info("stopped")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_hup)
        await self.start()
        await self.stopping.wait()
        await self.stop()

    def _on_hup(self) -> None:
        if self.tls is None and self.link_tls is None:
            log.info("received SIGHUP: no TLS listener, nothing to reload")
            return
        for tls in (self.tls, self.link_tls):
            if tls is None:
                continue
            try:
                tls.reload()
            except TlsError as exc:
                log.error("received SIGHUP: %s; the certificates in use are kept", exc)
            else:
                tls.after_reload()

    def _on_signal(self, sig: int) -> None:
        log.info("received %s, shutting down", signal.Signals(sig).name)
        self.stopping.set()


def _advertised(host: str) -> str:
    """The host stream clients are told to connect to (metadata, open): the listening
    address, unless it is a wildcard."""
    return "localhost" if host in ("", "0.0.0.0", "::") else host
