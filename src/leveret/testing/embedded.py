"""A real Leveret broker inside the calling process, with a clock the caller moves.

:class:`EmbeddedBroker` runs the same ``server.server.Server`` that ``leveret serve``
runs — listeners on 127.0.0.1 port 0, the store in a data directory of its own, every
front end — on an event loop in a thread of its own. Clients of any kind (blocking pika in
the test's thread, aio-pika on the test's loop, a Celery worker's threads) talk to it over
real sockets. The loop is a :class:`~leveret.testing.clock.ClockedEventLoop`, so
:meth:`EmbeddedBroker.advance` moves the broker's time: message TTLs, ``x-expires``,
scheduled messages, consumer timeouts, heartbeats and every other deadline of the broker
fall due at once, in order.

Why a thread and not a subprocess: start-up. A broker process pays for an interpreter and
the broker's imports (about half a second here); in the test process the imports are paid
once per session and a broker starts in a few milliseconds (the figures are in
``docs/testing.md``). The broker's work runs on its own thread, so a test never touches
the model directly: :meth:`EmbeddedBroker.call` runs a function on the broker's thread.

Used by ``leveret.testing.pytest_plugin`` (the fixtures) and directly by anyone who wants a
broker in a script: ``with EmbeddedBroker() as broker: ...``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from leveret.testing.clock import ClockedEventLoop

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from types import TracebackType

    from leveret.server.connection import ConnectionProtocol
    from leveret.server.server import Server

__all__ = ["DEFAULT_SETTINGS", "EmbeddedBroker", "EmbeddedBrokerError"]

T = TypeVar("T")

# What the embedded broker changes from ``leveret serve``'s defaults: free ports only, no
# HTTP listeners (they cost start-up time; ask for them with management=True), and
# heartbeats off unless a client asks for them (an advance longer than two heartbeat
# intervals drops a client that negotiated them, as a silent client would be dropped).
DEFAULT_SETTINGS: dict[str, object] = {
    "host": "127.0.0.1",
    "port": 0,
    "stream_port": 0,
    "tls_port": 0,
    "stream_tls_port": 0,
    "management": False,
    "management_port": 0,
    "prometheus": False,
    "prometheus_port": 0,
    "heartbeat": 0,
}

# Seconds to wait for the broker's thread to start or stop; a broker that takes longer is
# broken, and the test says so rather than hanging.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


# What Server.stop tells clients (RabbitMQ's text for a broker shutting down).
SHUTDOWN_REASON = "broker forced connection closure with reason 'shutdown'"


class EmbeddedBrokerError(Exception):
    """The embedded broker could not start, or was used while not running."""


class EmbeddedBroker:
    """A broker on a thread of the calling process (see the module docstring).

    ``settings`` are ``leveret serve``'s settings by name (``consumer_timeout=5000``,
    ``vhosts=["/", "other"]``, ``data_dir``...) over :data:`DEFAULT_SETTINGS`;
    ``LEVERET_*`` variables and config files are not read. Without ``data_dir`` the
    broker keeps its state in a temporary directory removed by :meth:`stop`, in memory
    (``/dev/shm``) where the system has one: the store's fsyncs then cost nothing, which
    makes start-up, a vhost per test and confirmed publishes ten times faster (the state
    still survives a restart).
    """

    def __init__(self, **settings: object) -> None:
        data_dir = settings.pop("data_dir", None)
        if data_dir is not None and not isinstance(data_dir, str | os.PathLike):
            raise EmbeddedBrokerError(f"data_dir must be a path, got {data_dir!r}")
        self._own_dir = not data_dir
        self.data_dir = Path(data_dir) if data_dir else None
        self.settings = {**DEFAULT_SETTINGS, **settings}
        self._loop: ClockedEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        # The clock survives restarts: the broker's time never goes back.
        self._offset = 0.0
        self.host = "127.0.0.1"
        self.port = 0
        self.stream_port = 0
        self.management_port = 0
        # Seconds the last start took (the pytest plugin's start-up figure).
        self.start_seconds = 0.0
        self._vhosts = 0
        # What went wrong on the broker's thread (an exception no one caught: a bug), as
        # asyncio's exception handler saw it; the pytest plugin fails the test with it.
        self.errors: list[str] = []

    # -- running ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> EmbeddedBroker:
        """Boot the broker (recovering ``data_dir``) and wait until it listens."""
        if self._server is not None:
            raise EmbeddedBrokerError("the broker is running already")
        from leveret.assembly import build_server
        from leveret.config import ConfigError, load
        from leveret.server.server import StoreError

        started = time.perf_counter()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="leveret-", dir=_scratch_root()))
        try:
            settings = load(environ={}, overrides={**self.settings, "data_dir": str(self.data_dir)})
        except ConfigError as exc:
            raise EmbeddedBrokerError(str(exc)) from None
        loop = ClockedEventLoop()
        loop.offset = self._offset
        loop.set_exception_handler(self._on_loop_error)
        ready = threading.Event()
        thread = threading.Thread(
            target=_run_loop, args=(loop, ready), name="leveret-broker", daemon=True
        )
        thread.start()
        ready.wait()
        self._loop, self._thread = loop, thread

        async def boot() -> Server:
            server = build_server(settings)
            await server.start()
            return server

        try:
            server = self._on_loop(boot(), START_TIMEOUT)
        except (StoreError, OSError) as exc:
            self._stop_loop()
            raise EmbeddedBrokerError(f"the broker did not start: {exc}") from None
        except BaseException:
            self._stop_loop()
            raise
        self._server = server
        amqp = server.servers[0].sockets[0].getsockname()
        self.host, self.port = amqp[0], amqp[1]
        self.stream_port = server.stream_server.settings.port
        if server.management is not None:
            self.management_port = _management_port(server)
        self.start_seconds = time.perf_counter() - started
        return self

    def stop(self) -> None:
        """Close every connection (320, as on SIGTERM, then the socket at once), write what
        is pending, stop the thread. The temporary data directory, if the broker made one,
        is removed."""
        server = self._server
        if server is not None:
            self._server = None

            async def shutdown() -> None:
                # A client the test left open is not driven: it would never answer the
                # close, and Server.stop would wait its grace period (3 s) for it.
                for conn in list(server.connections):
                    conn.shutdown(SHUTDOWN_REASON)
                    if conn.transport is not None:
                        conn.transport.close()
                await server.stop()

            try:
                self._on_loop(shutdown(), STOP_TIMEOUT)
            finally:
                self._stop_loop()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def restart(self) -> None:
        """Stop and start again on the same data directory (durable state comes back as
        after a restart of ``leveret serve``), on the same ports when they are still free,
        so URLs taken before stay good; the clock keeps its time."""
        own, self._own_dir = self._own_dir, False
        try:
            self.stop()
        finally:
            self._own_dir = own
        chosen = self.settings
        self.settings = {**chosen}
        if not chosen["port"]:
            self.settings["port"] = self.port
        if not chosen["stream_port"] and self.stream_port:
            self.settings["stream_port"] = self.stream_port
        try:
            self.start()
        except EmbeddedBrokerError:
            # Another process took a port meanwhile: any free one will do.
            self.settings = chosen
            self.start()
        finally:
            self.settings = chosen

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        self._offset = loop.offset
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT)
        if not thread.is_alive():
            loop.close()

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        what = str(context.get("message", "error"))
        self.errors.append(f"{what}: {exc!r}" if exc is not None else what)
        loop.default_exception_handler(context)

    # -- the clock --------------------------------------------------------------------------

    def time(self) -> float:
        """The broker's clock (monotonic seconds, moved on by ``advance``)."""
        loop = self._loop
        return loop.time() if loop is not None else time.monotonic() + self._offset

    def wall_time(self) -> float:
        """The broker's wall clock (``time.time()`` moved on by every advance): what it
        writes in ``x-death`` times and stream timestamps."""
        loop = self._loop
        return loop.wall_clock() if loop is not None else time.time() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the broker's clock ``seconds`` forward: every deadline that falls due on the
        way (message TTL and dead-lettering, ``x-expires``, scheduled messages, consumer
        timeouts, heartbeats, refused-login delays) fires at its own time, in order, and
        the call returns once the broker is idle at the new time — deliveries it made are
        written to the clients' sockets by then. ``advance(0)`` just lets the broker
        finish what is due."""
        loop = self._running_loop()
        self._on_loop(loop.advance(seconds), None)

    async def advance_async(self, seconds: float) -> None:
        """``advance`` for a test on an event loop: its own loop (an aio-pika consumer
        acking, for one) keeps running meanwhile."""
        loop = self._running_loop()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(loop.advance(seconds), loop))

    # -- reaching into the broker -------------------------------------------------------------

    @property
    def server(self) -> Server:
        """The running ``Server`` (its ``broker`` is the model). Touch it only through
        :meth:`call`: it belongs to the broker's thread."""
        if self._server is None:
            raise EmbeddedBrokerError("the broker is not running")
        return self._server

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the broker's thread and return what it returns (or raise
        what it raises): the safe way to look at or change the model from a test."""

        async def run() -> T:
            return fn(*args)

        return self._on_loop(run(), START_TIMEOUT)

    def admin(self, verb: str, **args: Any) -> Any:
        """A ``leveret ctl`` verb (``add_vhost``, ``set_permissions``, ``list_queues``...)
        on the running broker; its result, or :class:`EmbeddedBrokerError` with the
        broker's refusal."""
        server = self.server
        reply = self._on_loop(server.admin.handle(verb, args), START_TIMEOUT)
        if not reply.ok:
            raise EmbeddedBrokerError(f"{verb}: {reply.error}")
        return reply.result

    def queue_length(self, queue: str, vhost: str = "/") -> int:
        """Messages ready in ``queue`` (not counting those delivered and unacknowledged)."""

        def count() -> int:
            host = self.server.broker.vhosts.get(vhost)
            found = host.queues.get(queue) if host is not None else None
            if found is None:
                raise EmbeddedBrokerError(f"no queue '{queue}' in vhost '{vhost}'")
            return found.message_count

        return self.call(count)

    def url(
        self,
        vhost: str = "/",
        *,
        user: str = "guest",
        password: str = "guest",  # noqa: S107 - the broker's loopback-only default user
        heartbeat: int | None = 0,
    ) -> str:
        """An ``amqp://`` URL of this broker and ``vhost``. ``heartbeat=0`` (the default)
        asks clients to run without heartbeats, so that advancing the clock never drops
        them; pass a number to test heartbeats, or None to leave it to the client."""
        if self._server is None:
            raise EmbeddedBrokerError("the broker is not running")
        host = f"[{self.host}]" if ":" in self.host else self.host
        url = (
            f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{self.port}/"
            f"{quote(vhost, safe='')}"
        )
        return url if heartbeat is None else f"{url}?heartbeat={heartbeat}"

    def new_vhost(self, hint: str = "test", user: str = "guest") -> str:
        """Create a virtual host of a unique name (``hint`` makes it readable in logs) where
        ``user`` has every permission; return its name."""
        self._vhosts += 1
        cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in hint)[:60]
        name = f"{cleaned}-{self._vhosts}"
        self.admin("add_vhost", vhost=name)
        self.admin("set_permissions", user=user, vhost=name, configure=".*", write=".*", read=".*")
        return name

    def delete_vhost(self, name: str) -> None:
        """Delete a virtual host: its queues, exchanges and messages are removed and its
        connections closed at once (``connection.close`` 320, then the socket, without
        waiting for the client's close-ok: a client the test left open is not driven)."""
        server = self.server

        async def delete() -> Any:
            connections = [c for c in server.connections if _vhost_name(c) == name]
            reply = await server.admin.handle("delete_vhost", {"vhost": name})
            for conn in connections:
                if conn.transport is not None:
                    conn.transport.close()
            return reply

        reply = self._on_loop(delete(), START_TIMEOUT)
        if not reply.ok:
            raise EmbeddedBrokerError(f"delete_vhost: {reply.error}")

    # -- the thread ----------------------------------------------------------------------------

    def _running_loop(self) -> ClockedEventLoop:
        if self._loop is None or self._server is None:
            raise EmbeddedBrokerError("the broker is not running")
        return self._loop

    def _on_loop(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        loop = self._loop
        if loop is None:
            coro.close()
            raise EmbeddedBrokerError("the broker is not running")
        if threading.current_thread() is self._thread:
            coro.close()
            raise EmbeddedBrokerError("called on the broker's own thread: it would wait on itself")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


def _vhost_name(conn: ConnectionProtocol) -> str | None:
    shell = conn.shell
    return shell.info.vhost or None if shell is not None and shell.opened else None


def _scratch_root() -> str | None:
    """A RAM-backed directory for scratch data directories, or None (the system's temp)."""
    shm = Path("/dev/shm")  # noqa: S108 - only a parent for mkdtemp's private 0700 directory
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _run_loop(loop: ClockedEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        # Whatever the broker left running (a client's handler, a management request)
        # ends with the loop.
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())


def _management_port(server: Server) -> int:
    """The HTTP API's port (its first listener; 0 if it could not listen)."""
    management = server.management
    urls = management.urls if management is not None else []
    return int(urls[0].rsplit(":", 1)[1]) if urls else 0
